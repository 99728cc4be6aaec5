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
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return fmt.Errorf("unknown command %q for \"kubectl kcp bind\"; to bind an APIExport: kubectl kcp bind export %s", args[0], args[0])
		},
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

Run again with --accept on an existing binding of the same export to
accept claims the export added later. Nothing is left half made: a binding
this command created is deleted again when it does not become Bound, or
when an --accept names no claim of the export.

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

// claimVerbs are the verbs a permission claim may name.
var claimVerbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// parseAccepts reads --accept values as accepted claims.
func parseAccepts(accept []string) ([]apis.AcceptablePermission, error) {
	var out []apis.AcceptablePermission
	for _, a := range accept {
		res, verbs, ok := strings.Cut(a, "=")
		if !ok || res == "" || verbs == "" {
			return nil, fmt.Errorf("--accept %q: give RESOURCE[.GROUP]=VERB,VERB, for example secrets=get,list,watch", a)
		}
		resource, group, _ := strings.Cut(res, ".")
		c := apis.AcceptablePermission{PermissionClaim: apis.PermissionClaim{Group: group, Resource: resource}, State: apis.ClaimAccepted}
		for _, v := range strings.Split(verbs, ",") {
			if !slices.Contains(claimVerbs, v) {
				return nil, fmt.Errorf("--accept %q: %q is not a verb a claim can name (%s)", a, v, strings.Join(claimVerbs, ", "))
			}
			c.Verbs = append(c.Verbs, v)
		}
		out = append(out, c)
	}
	return out, nil
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
	claims, err := parseAccepts(accept)
	if err != nil {
		return err
	}
	s, _, dyn, err := o.loadCurrent()
	if err != nil {
		return err
	}
	bindings := dyn.Resource(apis.BindingsResource)
	if existing, err := bindings.Get(ctx, name, metav1.GetOptions{}); err == nil {
		return o.acceptOn(ctx, out, bindings, existing, string(s.current), path, exportName, claims)
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	spec := apis.APIBindingSpec{Reference: apis.ExportReference{Export: apis.ExportName{Path: path, Name: exportName}}, PermissionClaims: claims}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		return err
	}
	b := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": apis.Group + "/" + apis.Version, "kind": "APIBinding",
		"metadata": map[string]interface{}{"name": name}, "spec": u,
	}}
	created, err := bindings.Create(ctx, b, metav1.CreateOptions{})
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("workspace %s already has an APIBinding %s; pass --name to choose another name", s.current, name)
		}
		return err
	}
	fmt.Fprintf(out, "apibinding %s created in workspace %s\n", name, s.current)
	// undo deletes the binding this command created, so that a failure
	// leaves nothing half made.
	undo := func(cause error) error {
		uid := created.GetUID()
		err := bindings.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("%v; deleting apibinding %s again failed too (delete it yourself): %v", cause, name, err)
		}
		return fmt.Errorf("%v; apibinding %s was deleted again", cause, name)
	}
	if timeout <= 0 {
		return nil
	}
	last, err := waitBound(ctx, bindings, name, timeout)
	if err != nil {
		return undo(err)
	}
	res, _, _ := unstructured.NestedSlice(last.Object, "status", "boundResources")
	var names []string
	for _, r := range res {
		m, _ := r.(map[string]interface{})
		names = append(names, fmt.Sprintf("%v.%v", m["resource"], m["group"]))
	}
	fmt.Fprintf(out, "apibinding %s is bound: %s\n", name, strings.Join(names, ", "))
	if len(claims) > 0 {
		if err := acceptSelectors(ctx, out, bindings, last); err != nil {
			return undo(err)
		}
	}
	return nil
}

// waitBound waits until the binding is Bound.
func waitBound(ctx context.Context, bindings dynamic.ResourceInterface, name string, timeout time.Duration) (*unstructured.Unstructured, error) {
	var last *unstructured.Unstructured
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := bindings.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = got
		phase, _, _ := unstructured.NestedString(got.Object, "status", "phase")
		return phase == apis.PhaseBound, nil
	})
	if err != nil {
		return nil, fmt.Errorf("apibinding %s is not Bound after %s: %s", name, timeout, boundMessage(last))
	}
	return last, nil
}

// acceptOn accepts claims on an existing binding of the same export (an
// export may add claims after a workspace bound it).
func (o *wsOptions) acceptOn(ctx context.Context, out io.Writer, bindings dynamic.ResourceInterface, existing *unstructured.Unstructured, current, path, exportName string, claims []apis.AcceptablePermission) error {
	var b apis.APIBinding
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(existing.Object, &b); err != nil {
		return err
	}
	if b.Spec.Reference.Export.Path != path || b.Spec.Reference.Export.Name != exportName {
		return fmt.Errorf("workspace %s already has an APIBinding %s, to APIExport %s of %s; pass --name to choose another name",
			current, b.Name, b.Spec.Reference.Export.Name, b.Spec.Reference.Export.Path)
	}
	if len(claims) == 0 {
		fmt.Fprintf(out, "apibinding %s in workspace %s already binds %s:%s (phase %s); nothing to do\n", b.Name, current, path, exportName, b.Status.Phase)
		return nil
	}
	for _, c := range claims {
		if _, ok := offered(b.Status.ExportClaims, c); !ok {
			return noSuchClaim(c, b.Status.ExportClaims)
		}
		b.Spec.PermissionClaims = slices.DeleteFunc(b.Spec.PermissionClaims, func(a apis.AcceptablePermission) bool {
			return a.Group == c.Group && a.Resource == c.Resource
		})
		b.Spec.PermissionClaims = append(b.Spec.PermissionClaims, c)
	}
	spec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&b.Spec)
	if err != nil {
		return err
	}
	updated := existing.DeepCopy()
	updated.Object["spec"] = spec
	got, err := bindings.Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("accepting the claims on apibinding %s: %v", b.Name, err)
	}
	fmt.Fprintf(out, "apibinding %s in workspace %s updated\n", b.Name, current)
	return acceptSelectors(ctx, out, bindings, got)
}

// offered finds the export's claim an acceptance answers.
func offered(claims []apis.PermissionClaim, a apis.AcceptablePermission) (apis.PermissionClaim, bool) {
	for _, c := range claims {
		if c.Group == a.Group && c.Resource == a.Resource && sameSet(c.Verbs, a.Verbs) {
			return c, true
		}
	}
	return apis.PermissionClaim{}, false
}

// noSuchClaim says that an --accept answers no claim, and which claims
// the export makes.
func noSuchClaim(a apis.AcceptablePermission, claims []apis.PermissionClaim) error {
	var made []string
	for _, c := range claims {
		made = append(made, fmt.Sprintf("%s=%s", claimName(c.Group, c.Resource), strings.Join(c.Verbs, ",")))
	}
	list := "none"
	if len(made) > 0 {
		list = strings.Join(made, " ")
	}
	return fmt.Errorf("--accept %s=%s: the export makes no such permission claim (it claims: %s)", claimName(a.Group, a.Resource), strings.Join(a.Verbs, ","), list)
}

func claimName(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
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
			return noSuchClaim(a, st.Status.ExportClaims)
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
