package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// exportFile is the portable format: logical clusters parents first, each
// with its objects, CustomResourceDefinitions and namespaces first.
type exportFile struct {
	Kind     string          `json:"kind"`
	Version  int             `json:"version"`
	Clusters []exportCluster `json:"clusters"`
}

type exportCluster struct {
	Path    string                       `json:"path"`
	Type    string                       `json:"type,omitempty"`
	Objects []*unstructured.Unstructured `json:"objects"`
}

// notExported are made by kcp for every cluster or namespace, or are
// history rather than state.
var notExported = sets.New(
	schema.GroupResource{Resource: "events"},
	schema.GroupResource{Group: "events.k8s.io", Resource: "events"},
	schema.GroupResource{Group: "tenancy.kcp.io", Resource: "logicalclusters"},
	schema.GroupResource{Group: "tenancy.kcp.io", Resource: "workspaces"},
	schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"},
)

// madeByKCP are objects every workspace or namespace gets on its own; an
// import finds them already there and leaves them.
func madeByKCP(gr schema.GroupResource, ns, name string) bool {
	switch {
	case gr == (schema.GroupResource{Resource: "namespaces"}) && (name == "default" || name == "kube-system" || name == "kube-public"):
		return true
	case gr == (schema.GroupResource{Resource: "serviceaccounts"}) && name == "default":
		return true
	case gr == (schema.GroupResource{Resource: "configmaps"}) && name == "kube-root-ca.crt":
		return true
	case gr == (schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"}) && name == "workspace-owner":
		return true
	}
	return false
}

type transferOptions struct {
	kubeconfig string
	cluster    string
	recursive  bool
	file       string
}

func (o *transferOptions) config(cluster logicalcluster.Name) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.kubeconfig != "" {
		rules.ExplicitPath = o.kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, err
	}
	base := cfg.Host
	if i := strings.Index(base, "/clusters/"); i >= 0 {
		base = base[:i]
	}
	cfg.Host = strings.TrimSuffix(base, "/") + "/clusters/" + string(cluster)
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

func newExportCommand() *cobra.Command {
	o := &transferOptions{}
	cmd := &cobra.Command{
		Use:   "export --cluster PATH [--recursive] -f FILE",
		Short: "Write the objects of a logical cluster (and its workspaces) to a portable file",
		Long: `Export reads a logical cluster through the API of a running kcp (any
datastore) and writes its objects to a JSON file that 'kcp import' loads into
any other kcp: CustomResourceDefinitions first, then namespaces, then the
rest; with --recursive the workspaces below it too, parents first. Objects
keep their content, not their history: uid, resourceVersion, managedFields,
ownerReferences and status are dropped. Secrets are included in clear: keep
the file safe.`,
		Example: `  kcp export --kubeconfig .kcp/admin.kubeconfig --cluster root:team-a --recursive -f team-a.json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			root, err := logicalcluster.Parse(o.cluster)
			if err != nil || root.IsWildcard() {
				return fmt.Errorf("--cluster: %v", err)
			}
			var out io.Writer = cmd.OutOrStdout()
			if o.file != "" && o.file != "-" {
				f, err := os.Create(o.file)
				if err != nil {
					return err
				}
				defer f.Close()
				out = f
			}
			file := exportFile{Kind: "KcpExport", Version: 1}
			if err := o.export(cmd.Context(), cmd.ErrOrStderr(), root, "", &file); err != nil {
				return err
			}
			enc := json.NewEncoder(out)
			enc.SetIndent("", " ")
			return enc.Encode(file)
		},
	}
	cmd.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the server (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVar(&o.cluster, "cluster", "", "logical cluster to export, e.g. root:team-a")
	cmd.Flags().BoolVar(&o.recursive, "recursive", false, "also export the workspaces below it")
	cmd.Flags().StringVarP(&o.file, "file", "f", "-", "where to write (- for standard output)")
	return cmd
}

func (o *transferOptions) export(ctx context.Context, progress io.Writer, cluster logicalcluster.Name, wsType string, file *exportFile) error {
	cfg, err := o.config(cluster)
	if err != nil {
		return err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	lists, err := disc.ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		return fmt.Errorf("discovery in %s: %v", cluster, err)
	}
	ec := exportCluster{Path: string(cluster), Type: wsType}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			verbs := sets.New(r.Verbs...)
			gvr := gv.WithResource(r.Name)
			if strings.Contains(r.Name, "/") || !verbs.HasAll("list", "create") || notExported.Has(gvr.GroupResource()) {
				continue
			}
			items, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("listing %s in %s: %v", gvr.GroupResource(), cluster, err)
			}
			for i := range items.Items {
				u := &items.Items[i]
				if madeByKCP(gvr.GroupResource(), u.GetNamespace(), u.GetName()) || isSystem(u) {
					continue
				}
				ec.Objects = append(ec.Objects, clean(u))
			}
		}
	}
	sort.SliceStable(ec.Objects, func(i, j int) bool { return rank(ec.Objects[i]) < rank(ec.Objects[j]) })
	file.Clusters = append(file.Clusters, ec)
	fmt.Fprintf(progress, "exported %s: %d objects\n", cluster, len(ec.Objects))
	if !o.recursive {
		return nil
	}
	children, err := dyn.Resource(tenancy.WorkspacesResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing the workspaces of %s: %v", cluster, err)
	}
	for _, c := range children.Items {
		t, _, _ := unstructured.NestedString(c.Object, "spec", "type")
		if err := o.export(ctx, progress, cluster.Join(c.GetName()), t, file); err != nil {
			return err
		}
	}
	return nil
}

// isSystem: what upstream bootstraps in every server (system: roles, the
// system namespaces' content, priority-and-fairness defaults).
func isSystem(u *unstructured.Unstructured) bool {
	if strings.HasPrefix(u.GetName(), "system:") || u.GetLabels()["kubernetes.io/bootstrapping"] == "rbac-defaults" {
		return true
	}
	if ns := u.GetNamespace(); ns == "kube-system" || ns == "kube-public" || ns == "kube-node-lease" {
		return true
	}
	if u.GetAnnotations()["apf.kubernetes.io/autoupdate-spec"] != "" {
		return true
	}
	gvk := u.GroupVersionKind()
	return gvk.Group == "apiregistration.k8s.io" || (gvk.Group == "apiextensions.k8s.io" && strings.HasSuffix(u.GetName(), ".tenancy.kcp.io"))
}

func rank(u *unstructured.Unstructured) int {
	switch u.GetKind() {
	case "CustomResourceDefinition":
		return 0
	case "Namespace":
		return 1
	}
	return 2
}

// clean drops what belongs to one server's copy of the object.
func clean(u *unstructured.Unstructured) *unstructured.Unstructured {
	c := u.DeepCopy()
	for _, f := range []string{"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink", "ownerReferences", "deletionTimestamp", "deletionGracePeriodSeconds"} {
		unstructured.RemoveNestedField(c.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(c.Object, "status")
	ann := c.GetAnnotations()
	delete(ann, "kcp.io/cluster")
	if len(ann) == 0 {
		ann = nil
	}
	c.SetAnnotations(ann)
	return c
}

func newImportCommand() *cobra.Command {
	o := &transferOptions{}
	cmd := &cobra.Command{
		Use:   "import -f FILE",
		Short: "Load a file written by 'kcp export' into a running kcp",
		Long: `Import creates the logical clusters of an export file (as workspaces,
parents first) and then their objects, through the API of a running kcp on
any datastore. An object that already exists is a conflict and stops the
import with its name; the objects every workspace gets on its own (default
namespace and service account, kube-root-ca.crt, the owner's binding) are
left as they are.`,
		Example: `  kcp import --kubeconfig hosted.kubeconfig -f team-a.json`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var in io.Reader = cmd.InOrStdin()
			if o.file != "-" {
				f, err := os.Open(o.file)
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			var file exportFile
			if err := json.NewDecoder(in).Decode(&file); err != nil {
				return fmt.Errorf("%s is not a kcp export file: %v", o.file, err)
			}
			if file.Kind != "KcpExport" || file.Version != 1 {
				return fmt.Errorf("%s is not a kcp export file of version 1 (kind %q, version %d)", o.file, file.Kind, file.Version)
			}
			return o.importFile(cmd.Context(), cmd.ErrOrStderr(), &file)
		},
	}
	cmd.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the server (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVarP(&o.file, "file", "f", "-", "file to load (- for standard input)")
	return cmd
}

func (o *transferOptions) importFile(ctx context.Context, progress io.Writer, file *exportFile) error {
	for _, ec := range file.Clusters {
		cluster, err := logicalcluster.Parse(ec.Path)
		if err != nil || cluster.IsWildcard() {
			return fmt.Errorf("export file names an invalid cluster %q", ec.Path)
		}
		if err := o.ensureWorkspace(ctx, cluster, ec.Type); err != nil {
			return err
		}
		cfg, err := o.config(cluster)
		if err != nil {
			return err
		}
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return err
		}
		disc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			return err
		}
		mapping := map[schema.GroupVersionKind]struct {
			gvr        schema.GroupVersionResource
			namespaced bool
		}{}
		_, lists, err := disc.ServerGroupsAndResources()
		if err != nil && len(lists) == 0 {
			return err
		}
		for _, l := range lists {
			gv, _ := schema.ParseGroupVersion(l.GroupVersion)
			for _, r := range l.APIResources {
				if !strings.Contains(r.Name, "/") {
					mapping[gv.WithKind(r.Kind)] = struct {
						gvr        schema.GroupVersionResource
						namespaced bool
					}{gv.WithResource(r.Name), r.Namespaced}
				}
			}
		}
		created, kept := 0, 0
		for i, u := range ec.Objects {
			m, ok := mapping[u.GroupVersionKind()]
			if !ok {
				return fmt.Errorf("%s %s/%s in %s: the target serves no %s", u.GetKind(), u.GetNamespace(), u.GetName(), cluster, u.GroupVersionKind())
			}
			var res dynamic.ResourceInterface = dyn.Resource(m.gvr)
			if m.namespaced {
				res = dyn.Resource(m.gvr).Namespace(u.GetNamespace())
			}
			_, err := res.Create(ctx, u, metav1.CreateOptions{})
			switch {
			case apierrors.IsAlreadyExists(err) && madeByKCP(m.gvr.GroupResource(), u.GetNamespace(), u.GetName()):
				kept++
			case apierrors.IsAlreadyExists(err):
				return fmt.Errorf("conflict: %s %q already exists in %s (import into an empty workspace, or delete it first)", u.GetKind(), qualified(u), cluster)
			case err != nil:
				return fmt.Errorf("creating %s %q in %s: %v", u.GetKind(), qualified(u), cluster, err)
			default:
				created++
			}
			if (i+1)%500 == 0 {
				fmt.Fprintf(progress, "  %s: %d of %d objects\n", cluster, i+1, len(ec.Objects))
			}
		}
		fmt.Fprintf(progress, "imported %s: %d objects created, %d already there\n", cluster, created, kept)
	}
	return nil
}

func qualified(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

// ensureWorkspace creates the Workspace of cluster in its parent when the
// cluster does not exist, and waits until it is ready.
func (o *transferOptions) ensureWorkspace(ctx context.Context, cluster logicalcluster.Name, wsType string) error {
	parent, ok := cluster.Parent()
	if !ok {
		return nil // root always exists
	}
	cfg, err := o.config(parent)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := tenancy.CreateWorkspace(ctx, dyn, cluster.Base(), wsType, true, time.Minute); err != nil {
		return fmt.Errorf("workspace %s: %v", cluster, err)
	}
	return nil
}
