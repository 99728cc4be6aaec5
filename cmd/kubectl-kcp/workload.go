package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/kcpsql/kcp/schema/apiresource"
	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/syncer"
)

// syncerNamespace holds the syncers' service accounts in a workspace.
const syncerNamespace = "kcp-syncers"

func newWorkloadCommand() *cobra.Command {
	o := &wsOptions{}
	cmd := &cobra.Command{
		Use:   "workload",
		Short: "Register physical clusters (SyncTargets) and run their syncers",
	}
	o.addKubectlFlags(cmd)
	var labels, resources, output, kubeconfigOut, image string
	var expiration time.Duration
	sync := &cobra.Command{
		Use:   "sync NAME",
		Short: "Register a physical cluster in the current workspace and write what its syncer needs",
		Long: `Creates (or updates) the SyncTarget NAME in the current workspace, a service
account whose token may only read that SyncTarget and write its status,
and writes:

  - a kubeconfig for the syncer (--kcp-kubeconfig-out), and the command line
    that runs bin/syncer as a plain process beside the physical cluster;
  - with -o, a manifest to apply to the physical cluster: a namespace, a
    service account allowed to read nodes, a Secret with the kubeconfig,
    and a Deployment running the syncer image.`,
		Example: `  kubectl kcp ws use root:compute
  kubectl kcp workload sync pc1 --labels region=eu-west,provider=aws -o syncer-pc1.yaml
  kubectl --kubeconfig physical.kubeconfig apply -f syncer-pc1.yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.sync(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], labels, resources, output, kubeconfigOut, image, expiration)
		},
	}
	sync.Flags().StringVar(&labels, "labels", "", "location attributes of the cluster, as k=v,k=v (region, provider, ...)")
	sync.Flags().StringVar(&resources, "resources", "", "more resources to sync besides the built-in kinds (Deployments, StatefulSets, Jobs, Services, ... see docs/multicluster.md): CRDs of the physical cluster as plural.group,... (spec.resources of the SyncTarget; the syncer imports their schemas)")
	sync.Flags().StringVarP(&output, "output", "o", "", "write the manifest for the physical cluster to this file (- for standard output)")
	sync.Flags().StringVar(&kubeconfigOut, "kcp-kubeconfig-out", "", "where to write the syncer's kubeconfig for kcp (default: NAME-syncer.kubeconfig)")
	sync.Flags().StringVar(&image, "syncer-image", "kcp-syncer:latest", "image of cmd/syncer for the manifest's Deployment (build and push it yourself)")
	sync.Flags().DurationVar(&expiration, "token-expiration", 365*24*time.Hour, "how long the syncer's token is valid; run sync again to renew it")
	cmd.AddCommand(sync, o.cordonCommand("cordon"), o.cordonCommand("drain"), o.cordonCommand("uncordon"), o.taintCommand())
	return cmd
}

// targetVerbs are the SyncTarget maintenance commands: cordon (no new
// namespaces; those there stay), drain (cordon, and move the namespaces
// there to other targets, each copy staying until its replacement is
// Available) and uncordon (both undone).
var targetVerbs = map[string]struct{ short, long, patch, done string }{
	"cordon": {
		short: "Keep new namespaces off a SyncTarget (those already there stay)",
		long:  "Marks the SyncTarget unschedulable: Placements assign it no new namespaces; namespaces already there stay.",
		patch: `{"spec":{"unschedulable":true}}`, done: "cordoned",
	},
	"drain": {
		short: "Move the namespaces off a SyncTarget, gracefully, for planned maintenance",
		long: "Cordons the SyncTarget and hands each namespace assigned to it to another target its Placement selects.\n" +
			"A copy on this cluster stays until every Deployment of its namespace is Available on the replacement;\n" +
			"then its syncer deletes it. A namespace whose Placement has no other usable target stays.\n" +
			"The drain is over when the physical cluster has no namespace labelled workload.kcp.io/sync-target left.\n" +
			"Undo it with uncordon.",
		patch: `{"spec":{"unschedulable":true,"drain":true}}`, done: "draining",
	},
	"uncordon": {
		short: "Let Placements assign namespaces to a SyncTarget again (ends a drain too)",
		long:  "Clears unschedulable and drain: the SyncTarget takes new namespaces again. Namespaces that moved away stay where they are.",
		patch: `{"spec":{"unschedulable":false,"drain":false}}`, done: "uncordoned",
	},
}

// cordonCommand is one of targetVerbs.
func (o *wsOptions) cordonCommand(verb string) *cobra.Command {
	v := targetVerbs[verb]
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:     verb + " NAME",
		Short:   v.short,
		Long:    v.long,
		Example: "  kubectl kcp workload " + verb + " pc1",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			s, _, dyn, err := o.loadCurrent()
			if err != nil {
				return err
			}
			if _, err := dyn.Resource(workload.SyncTargetsResource).Patch(ctx, args[0], types.MergePatchType, []byte(v.patch), metav1.PatchOptions{}); err != nil {
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("no SyncTarget %s in workspace %s", args[0], s.current)
				}
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "SyncTarget %s %s in workspace %s\n", args[0], v.done, s.current)
			if verb != "drain" {
				return nil
			}
			if !wait {
				fmt.Fprintf(cmd.OutOrStdout(), "follow it with: kubectl kcp workload drain %s --wait (or kubectl get synctarget %s -o jsonpath='{.status.drain.message}')\n", args[0], args[0])
				return nil
			}
			return waitDrained(ctx, cmd.OutOrStdout(), dyn, args[0], timeout)
		},
	}
	if verb == "drain" {
		cmd.Flags().BoolVar(&wait, "wait", false, "wait until no namespace is assigned to the SyncTarget, printing what is still there and why; fail after --timeout naming what blocks")
		cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long --wait waits")
		cmd.Example += "\n  kubectl kcp workload drain pc1 --wait --timeout 5m"
	}
	return cmd
}

// waitDrained polls a draining SyncTarget's status.drain until nothing is
// assigned to it, printing each new state; after timeout it fails with
// what is still there and why.
func waitDrained(ctx context.Context, out io.Writer, dyn dynamic.Interface, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	var st workload.DrainStatus
	for {
		obj, err := dyn.Resource(workload.SyncTargetsResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		raw, found, _ := unstructured.NestedMap(obj.Object, "status", "drain")
		if found {
			st = workload.DrainStatus{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st); err != nil {
				return fmt.Errorf("SyncTarget %s: status.drain: %v", name, err)
			}
			if st.Message != last {
				fmt.Fprintln(out, st.Message)
				for _, b := range st.Blocked {
					fmt.Fprintf(out, "  %s namespace %s: %s\n", b.Workspace, b.Namespace, b.Reason)
				}
				last = st.Message
			}
			if st.Namespaces == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			msg := "kcp has not reported on the drain yet"
			if found {
				msg = st.Message
			}
			return fmt.Errorf("SyncTarget %s is not drained after %s: %s", name, timeout, msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

func (o *wsOptions) sync(ctx context.Context, out, errOut io.Writer, name, labelArg, resourcesArg, output, kubeconfigOut, image string, expiration time.Duration) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("SyncTarget name %q: %s", name, strings.Join(errs, "; "))
	}
	labels, err := parseLabels(labelArg)
	if err != nil {
		return err
	}
	var resources []interface{}
	if resourcesArg != "" {
		grs, err := syncer.ParseResources(strings.Split(resourcesArg, ","))
		if err != nil {
			return err
		}
		for _, gr := range grs {
			resources = append(resources, gr.Resource+"."+gr.Group)
		}
	}
	s, cfg, dyn, err := o.loadCurrent()
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	// The SyncTarget.
	targets := dyn.Resource(workload.SyncTargetsResource)
	st, err := targets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		st = &unstructured.Unstructured{}
		st.SetAPIVersion(workload.Group + "/" + workload.Version)
		st.SetKind("SyncTarget")
		st.SetName(name)
		st.SetLabels(labels)
		if resources != nil {
			st.Object["spec"] = map[string]interface{}{"resources": resources}
		}
		if st, err = targets.Create(ctx, st, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating SyncTarget %s in %s: %v", name, s.current, err)
		}
		fmt.Fprintf(errOut, "SyncTarget %s created in workspace %s\n", name, s.current)
	case err != nil:
		return fmt.Errorf("reading SyncTarget %s in %s: %v", name, s.current, err)
	default:
		if labelArg != "" || resources != nil {
			if labelArg != "" {
				st.SetLabels(labels)
			}
			if resources != nil {
				if err := unstructured.SetNestedSlice(st.Object, resources, "spec", "resources"); err != nil {
					return err
				}
			}
			if st, err = targets.Update(ctx, st, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("updating SyncTarget %s: %v", name, err)
			}
		}
		fmt.Fprintf(errOut, "SyncTarget %s exists in workspace %s; renewing its syncer's credential\n", name, s.current)
	}

	// The syncer's identity: may read this SyncTarget and write its status.
	sa := "syncer-" + name
	role := "kcp-syncer-" + name
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: syncerNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %v", syncerNamespace, err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(syncerNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating service account %s/%s: %v", syncerNamespace, sa, err)
	}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{workload.Group}, Resources: []string{"synctargets"}, ResourceNames: []string{name}, Verbs: []string{"get", workload.VerbSync}},
		{APIGroups: []string{workload.Group}, Resources: []string{"synctargets/status"}, ResourceNames: []string{name}, Verbs: []string{"get", "update", "patch"}},
		// Its API imports (--resources); admission lets it write only its own.
		{APIGroups: []string{apiresource.Group}, Resources: []string{"apiresourceimports"}, Verbs: []string{"get", "create", "update"}},
	}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: syncerNamespace, Name: sa}}}
	if err := upsert(func() error {
		_, err := kube.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{})
		return err
	},
		func() error {
			_, err := kube.RbacV1().ClusterRoles().Update(ctx, cr, metav1.UpdateOptions{})
			return err
		}); err != nil {
		return fmt.Errorf("ClusterRole %s: %v", role, err)
	}
	if err := upsert(func() error {
		_, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
		return err
	},
		func() error {
			_, err := kube.RbacV1().ClusterRoleBindings().Update(ctx, crb, metav1.UpdateOptions{})
			return err
		}); err != nil {
		return fmt.Errorf("ClusterRoleBinding %s: %v", role, err)
	}
	seconds := int64(expiration.Seconds())
	tr, err := kube.CoreV1().ServiceAccounts(syncerNamespace).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("issuing the syncer's token: %v", err)
	}

	// The syncer's kubeconfig for kcp: this workspace, this token only.
	caData := s.raw.Clusters[s.cluster].CertificateAuthorityData
	if len(caData) == 0 && s.raw.Clusters[s.cluster].CertificateAuthority != "" {
		if caData, err = os.ReadFile(s.raw.Clusters[s.cluster].CertificateAuthority); err != nil {
			return err
		}
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kcp"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: caData}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["syncer"] = &clientcmdapi.Context{Cluster: "kcp", AuthInfo: sa}
	kc.CurrentContext = "syncer"
	kcBytes, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	if kubeconfigOut == "" {
		kubeconfigOut = name + "-syncer.kubeconfig"
	}
	if err := os.WriteFile(kubeconfigOut, kcBytes, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(errOut, "The syncer's kubeconfig for kcp (valid %s) is in %s. Run the syncer as a process beside the physical cluster with:\n\n"+
		"  syncer --kcp-kubeconfig %s --sync-target %s --kubeconfig <physical cluster kubeconfig>\n\n", expiration, kubeconfigOut, kubeconfigOut, name)
	if output == "" {
		return nil
	}
	manifest, err := syncerManifest(name, image, kcBytes, resources)
	if err != nil {
		return err
	}
	if output == "-" {
		_, err = out.Write(manifest)
		return err
	}
	if err := os.WriteFile(output, manifest, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(errOut, "or apply %s to the physical cluster (it runs image %s).\n", output, image)
	return nil
}

func upsert(create, update func() error) error {
	if err := create(); !apierrors.IsAlreadyExists(err) {
		return err
	}
	return update()
}

func parseLabels(arg string) (map[string]string, error) {
	labels := map[string]string{}
	if arg == "" {
		return labels, nil
	}
	for _, kv := range strings.Split(arg, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--labels: %q is not key=value", kv)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("--labels: key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("--labels: value %q: %s", v, strings.Join(errs, "; "))
		}
		labels[k] = v
	}
	return labels, nil
}

// syncerManifest is what the physical cluster needs to run the syncer: the
// least it may do there is read nodes (for the heartbeat's capacity) and
// manage namespaces and the synced resources (it writes only the namespaces
// it creates, kcp-<hash>, and what is in them).
func syncerManifest(name, image string, kubeconfig []byte, resources []interface{}) ([]byte, error) {
	ns := "kcp-syncer-" + name
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: all},
	}
	// Every synced resource (workload.SyncedResources, the one list).
	byGroup := map[string][]string{}
	var groups []string
	for _, r := range workload.SyncedResources {
		if _, ok := byGroup[r.Group]; !ok {
			groups = append(groups, r.Group)
		}
		byGroup[r.Group] = append(byGroup[r.Group], r.Resource)
	}
	for _, g := range groups {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{g}, Resources: byGroup[g], Verbs: all})
	}
	// Projection (workload.ProjectedResources): what the cluster runs for
	// the workspaces is read, and a Pod a workspace deletes is deleted.
	rules = append(rules,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods", "endpoints", "events"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"replicasets", "controllerrevisions"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"delete"}})
	// A tenant's Roles grant what the syncer itself may not have (escalate),
	// and RoleBindings bind them or the ClusterRoles that are safe to
	// reference on a shared cluster (bind); both only in the namespaces
	// the syncer creates, which is the syncer's rule, not RBAC's.
	rules = append(rules,
		rbacv1.PolicyRule{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"roles"}, Verbs: []string{"escalate", "bind"}},
		rbacv1.PolicyRule{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"}, ResourceNames: workload.SyncedClusterRoles, Verbs: []string{"bind"}})
	// Pod streams kcp forwards through the syncer's tunnel (logs, exec,
	// attach, port-forward of the pods it runs; the syncer checks the
	// namespace is its own). Websocket upgrades are GETs authorized as
	// create.
	rules = append(rules,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec", "pods/attach", "pods/portforward"}, Verbs: []string{"get", "create"}})
	// Pod metrics (kubectl top pods in a workspace), through the tunnel
	// too, where the cluster serves metrics.k8s.io.
	rules = append(rules,
		rbacv1.PolicyRule{APIGroups: []string{"metrics.k8s.io"}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}})
	// --resources: the CRDs (read, for their schemas) and their objects.
	for _, r := range resources {
		plural, group, _ := strings.Cut(r.(string), ".")
		rules = append(rules,
			rbacv1.PolicyRule{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, ResourceNames: []string{r.(string)}, Verbs: []string{"get"}},
			rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{plural, plural + "/status"}, Verbs: all})
	}
	app := map[string]string{"app.kubernetes.io/name": "kcp-syncer", "kcp.io/sync-target": name}
	replicas := int32(1)
	objs := []runtime.Object{
		&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: metav1.ObjectMeta{Name: "kcp-syncer", Namespace: ns}},
		&rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"}, ObjectMeta: metav1.ObjectMeta{Name: ns},
			Rules: rules},
		&rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"}, ObjectMeta: metav1.ObjectMeta{Name: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ns},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "kcp-syncer"}}},
		&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: metav1.ObjectMeta{Name: "kcp-kubeconfig", Namespace: ns},
			StringData: map[string]string{"kubeconfig": string(kubeconfig)}},
		&appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, ObjectMeta: metav1.ObjectMeta{Name: "kcp-syncer", Namespace: ns, Labels: app},
			Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: app},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: app}, Spec: corev1.PodSpec{
					ServiceAccountName: "kcp-syncer",
					Containers: []corev1.Container{{Name: "syncer", Image: image,
						Args:         []string{"--kcp-kubeconfig=/kcp/kubeconfig", "--sync-target=" + name},
						VolumeMounts: []corev1.VolumeMount{{Name: "kcp", MountPath: "/kcp", ReadOnly: true}}}},
					Volumes: []corev1.Volume{{Name: "kcp", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "kcp-kubeconfig"}}}},
				}}}},
	}
	var b strings.Builder
	for _, obj := range objs {
		y, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return []byte(b.String()), nil
}
