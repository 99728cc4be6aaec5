package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"

	"github.com/kcpsql/kcp/schema/workload"
)

// taintChange is one argument of kubectl kcp workload taint: a taint to
// add or replace (key=value:Effect), or to remove (key-, key:Effect-).
type taintChange struct {
	taint  workload.Taint
	remove bool
}

func parseTaintArg(arg string) (taintChange, error) {
	if rest, ok := strings.CutSuffix(arg, "-"); ok {
		key, effect, _ := strings.Cut(rest, ":")
		if key == "" || strings.Contains(key, "=") {
			return taintChange{}, fmt.Errorf("%q: removing a taint takes key- or key:Effect-", arg)
		}
		if effect != "" && !validEffect(effect) {
			return taintChange{}, fmt.Errorf("%q: effect %q is not NoSchedule, PreferNoSchedule or NoExecute", arg, effect)
		}
		return taintChange{taint: workload.Taint{Key: key, Effect: effect}, remove: true}, nil
	}
	kv, effect, ok := strings.Cut(arg, ":")
	if !ok || !validEffect(effect) {
		return taintChange{}, fmt.Errorf("%q: a taint is key[=value]:Effect, with Effect NoSchedule, PreferNoSchedule or NoExecute", arg)
	}
	key, value, _ := strings.Cut(kv, "=")
	if key == "" {
		return taintChange{}, fmt.Errorf("%q: the taint has no key", arg)
	}
	return taintChange{taint: workload.Taint{Key: key, Value: value, Effect: effect}}, nil
}

func validEffect(e string) bool {
	return e == workload.TaintNoSchedule || e == workload.TaintPreferNoSchedule || e == workload.TaintNoExecute
}

// applyTaintChanges changes a list of taints; it fails when a removal
// matches nothing.
func applyTaintChanges(taints []workload.Taint, changes []taintChange) ([]workload.Taint, error) {
	out := append([]workload.Taint(nil), taints...)
	for _, c := range changes {
		if c.remove {
			n := len(out)
			kept := out[:0]
			for _, t := range out {
				if t.Key == c.taint.Key && (c.taint.Effect == "" || t.Effect == c.taint.Effect) {
					continue
				}
				kept = append(kept, t)
			}
			out = kept
			if len(out) == n {
				return nil, fmt.Errorf("no taint %s to remove", c.taint.Key)
			}
			continue
		}
		replaced := false
		for i := range out {
			if out[i].Key == c.taint.Key && out[i].Effect == c.taint.Effect {
				out[i] = c.taint
				replaced = true
			}
		}
		if !replaced {
			out = append(out, c.taint)
		}
	}
	return out, nil
}

func (o *wsOptions) taintCommand() *cobra.Command {
	var reserved bool
	var tolerableBy []string
	cmd := &cobra.Command{
		Use:   "taint NAME key[=value]:Effect ... | key[:Effect]- ...",
		Short: "Taint a SyncTarget (or remove a taint), as kubectl taint does for nodes",
		Long: `Adds, replaces or removes taints of a SyncTarget of the current workspace.
Effects: NoSchedule (no new namespaces of Placements that do not tolerate it),
PreferNoSchedule (only when no other target is usable), NoExecute (the
namespaces already there move away too, after the tolerationSeconds of their
Placement's toleration, at once without one).

--reserved reserves the taints added: only Placements of the workspaces named
by --tolerable-by (none without it) may tolerate them.`,
		Example: `  kubectl kcp workload taint pc1 maintenance=true:NoExecute
  kubectl kcp workload taint pc2 gpu=a100:NoSchedule --reserved --tolerable-by 'root:ml,root:research:*'
  kubectl kcp workload taint pc1 maintenance-`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			var changes []taintChange
			for _, a := range args[1:] {
				c, err := parseTaintArg(a)
				if err != nil {
					return err
				}
				if !c.remove {
					c.taint.Reserved, c.taint.TolerableBy = reserved, tolerableBy
				}
				changes = append(changes, c)
			}
			if len(tolerableBy) > 0 && !reserved {
				return fmt.Errorf("--tolerable-by applies to reserved taints: add --reserved")
			}
			s, _, dyn, err := o.loadCurrent()
			if err != nil {
				return err
			}
			client := dyn.Resource(workload.SyncTargetsResource)
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				u, err := client.Get(ctx, args[0], metav1.GetOptions{})
				if err != nil {
					return err
				}
				var st workload.SyncTarget
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &st); err != nil {
					return err
				}
				taints, err := applyTaintChanges(st.Spec.Taints, changes)
				if err != nil {
					return err
				}
				raw := make([]interface{}, 0, len(taints))
				for i := range taints {
					m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&taints[i])
					if err != nil {
						return err
					}
					raw = append(raw, m)
				}
				if len(raw) == 0 {
					unstructured.RemoveNestedField(u.Object, "spec", "taints")
				} else if err := unstructured.SetNestedSlice(u.Object, raw, "spec", "taints"); err != nil {
					return err
				}
				_, err = client.Update(ctx, u, metav1.UpdateOptions{})
				return err
			})
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("no SyncTarget %s in workspace %s", args[0], s.current)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "SyncTarget %s tainted in workspace %s\n", args[0], s.current)
			return nil
		},
	}
	cmd.Flags().BoolVar(&reserved, "reserved", false, "reserve the taints added: only Placements of the --tolerable-by workspaces may tolerate them")
	cmd.Flags().StringSliceVar(&tolerableBy, "tolerable-by", nil, "workspaces whose Placements may tolerate the reserved taints (root:ml, or root:ml:* for those inside)")
	return cmd
}
