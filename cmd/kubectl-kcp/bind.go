package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/spf13/cobra"

	"github.com/kcpsql/kcp/schema/apis"
	"github.com/kcpsql/kcp/schema/conditions"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

func newBindCommand() *cobra.Command {
	o := &wsOptions{}
	cmd := &cobra.Command{
		Use:   "bind",
		Short: "Bind an API another workspace exports into the current workspace",
	}
	o.addKubectlFlags(cmd)
	var name string
	var accept []string
	var timeout time.Duration
	export := &cobra.Command{
		Use:   "export WORKSPACE:EXPORT",
		Short: "Create an APIBinding to an APIExport and wait until its resources are served",
		Long: `Creates an APIBinding in the current workspace to the APIExport EXPORT of
WORKSPACE (a full path such as root:platform), and waits until the binding is
Bound: the export's resources then appear in discovery, kubectl
api-resources and explain, and their objects are stored in this workspace.

Binding needs the verb "bind" on apiexports/EXPORT in WORKSPACE. An export
may claim permissions on other resources of this workspace (shown by the
binding's status.exportPermissionClaims); accept one with --accept
RESOURCE[.GROUP]=VERB,VERB. A claim not accepted is not granted. A claim the
export limits to labels is accepted with its selector, which is printed.

Deleting the binding stops serving the resources and deletes this
workspace's objects of them, as deleting a CRD does (docs/apis.md).`,
		Example: `  kubectl kcp bind export root:platform:databases
  kubectl kcp bind export root:platform:databases --accept secrets=get,list,watch`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.bind(cmd.Context(), cmd.OutOrStdout(), args[0], name, accept, timeout)
		},
	}
	export.Flags().StringVar(&name, "name", "", "name of the APIBinding (default: the export's name)")
	export.Flags().StringArrayVar(&accept, "accept", nil, "accept a permission claim of the export, as RESOURCE[.GROUP]=VERB,VERB (repeatable)")
	export.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the binding to be Bound (0: do not wait)")
	cmd.AddCommand(export)
	return cmd
}

func (o *wsOptions) bind(ctx context.Context, out io.Writer, arg, name string, accept []string, timeout time.Duration) error {
	i := strings.LastIndex(arg, ":")
	if i <= 0 || i == len(arg)-1 {
		return fmt.Errorf("%q: give the export as WORKSPACE:EXPORT, for example root:platform:databases", arg)
	}
	path, exportName := arg[:i], arg[i+1:]
	if _, err := logicalcluster.Parse(path); err != nil {
		return fmt.Errorf("%q is not a workspace path: %v", path, err)
	}
	if name == "" {
		name = exportName
	}
	var claims []interface{}
	for _, a := range accept {
		res, verbs, ok := strings.Cut(a, "=")
		if !ok || res == "" || verbs == "" {
			return fmt.Errorf("--accept %q: give RESOURCE[.GROUP]=VERB,VERB, for example secrets=get,list,watch", a)
		}
		resource, group, _ := strings.Cut(res, ".")
		var vs []interface{}
		for _, v := range strings.Split(verbs, ",") {
			vs = append(vs, v)
		}
		claims = append(claims, map[string]interface{}{"group": group, "resource": resource, "verbs": vs, "state": apis.ClaimAccepted})
	}
	s, _, dyn, err := o.loadCurrent()
	if err != nil {
		return err
	}
	spec := map[string]interface{}{"reference": map[string]interface{}{"export": map[string]interface{}{"path": path, "name": exportName}}}
	if len(claims) > 0 {
		spec["permissionClaims"] = claims
	}
	b := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": apis.Group + "/" + apis.Version, "kind": "APIBinding",
		"metadata": map[string]interface{}{"name": name}, "spec": spec,
	}}
	bindings := dyn.Resource(apis.BindingsResource)
	if _, err := bindings.Create(ctx, b, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("workspace %s already has an APIBinding %s; pass --name to choose another name", s.current, name)
		}
		return err
	}
	fmt.Fprintf(out, "apibinding %s created in workspace %s\n", name, s.current)
	if timeout <= 0 {
		return nil
	}
	var last *unstructured.Unstructured
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := bindings.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = got
		phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
		return phase == apis.PhaseBound, nil
	})
	if err != nil {
		return fmt.Errorf("apibinding %s is not Bound after %s: %s", name, timeout, boundMessage(last))
	}
	res, _, _ := unstructured.NestedSlice(last.Object, "status", "boundResources")
	var names []string
	for _, r := range res {
		m, _ := r.(map[string]interface{})
		names = append(names, fmt.Sprintf("%v.%v", m["resource"], m["group"]))
	}
	fmt.Fprintf(out, "apibinding %s is bound: %s\n", name, strings.Join(names, ", "))
	if len(claims) > 0 {
		return acceptSelectors(ctx, out, bindings, last)
	}
	return nil
}

// acceptSelectors gives each accepted claim the label selector the export
// claims it with (the consumer learns it from the binding's status: it
// cannot read the export), prints what was accepted, and warns of accepts
// that match no claim.
func acceptSelectors(ctx context.Context, out io.Writer, bindings dynamic.ResourceInterface, b *unstructured.Unstructured) error {
	var st apis.APIBinding
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(b.Object, &st); err != nil {
		return err
	}
	changed := false
	for i, a := range st.Spec.PermissionClaims {
		found := false
		for _, c := range st.Status.ExportClaims {
			if c.Group != a.Group || c.Resource != a.Resource || !sameSet(c.Verbs, a.Verbs) {
				continue
			}
			found = true
			what := fmt.Sprintf("%s (%s)", schema.GroupResource{Group: a.Group, Resource: a.Resource}, strings.Join(a.Verbs, ","))
			if c.LabelSelector != nil {
				sel, _ := metav1.LabelSelectorAsSelector(c.LabelSelector)
				fmt.Fprintf(out, "accepted permission claim %s, limited to objects with the labels %s\n", what, sel)
				if !equality.Semantic.DeepEqual(a.LabelSelector, c.LabelSelector) {
					st.Spec.PermissionClaims[i].LabelSelector = c.LabelSelector.DeepCopy()
					changed = true
				}
			} else {
				fmt.Fprintf(out, "accepted permission claim %s, on every object\n", what)
			}
		}
		if !found {
			fmt.Fprintf(out, "warning: the export makes no permission claim %s=%s; nothing was granted for it (the claims are in the binding's status.exportPermissionClaims)\n",
				schema.GroupResource{Group: a.Group, Resource: a.Resource}, strings.Join(a.Verbs, ","))
		}
	}
	if !changed {
		return nil
	}
	claims, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st.Spec)
	if err != nil {
		return err
	}
	b = b.DeepCopy()
	b.Object["spec"] = claims
	if _, err := bindings.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("accepting the claims' label selectors: %v", err)
	}
	return nil
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func boundMessage(b *unstructured.Unstructured) string {
	if b == nil {
		return "it could not be read"
	}
	if c, ok := conditions.Find(b, apis.ConditionBound); ok {
		return c.Reason + ": " + c.Message
	}
	return "no status yet"
}
