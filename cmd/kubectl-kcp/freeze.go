package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/schema/tenancy"
	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// newFreezeCommands are `ws freeze` and `ws unfreeze`.
func newFreezeCommands(o *wsOptions) []*cobra.Command {
	var reason string
	freeze := &cobra.Command{
		Use:   "freeze NAME|PATH --reason REASON",
		Short: "Make a workspace read-only, with a reason",
		Long: `Freeze a workspace: every write into it (create, update, patch, delete of
any object, custom resources included; exec, attach and port-forward) is
refused with a message naming the reason, until it is unfrozen. Reads and
watches go on, and kcp's own controllers still finish what they do
(deletions). The workspaces inside it are not frozen with it.

It sets spec.frozen of the Workspace in the parent, which needs the verb
"update" on that Workspace granted by the parent's RBAC: creating or owning
the workspace is not enough, so a tenant cannot unfreeze what its parent
froze. NAME is a workspace of the current one; PATH is absolute (root:...).
The command waits until the Workspace reports the freeze (its condition
Frozen); freezing again changes the reason.`,
		Example: `  kubectl ws freeze team-a --reason "incident 4711: investigating"
  kubectl ws freeze root:org:team-a --reason "migration to the new cluster"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.freeze(cmd.OutOrStdout(), args[0], reason, false)
		},
	}
	freeze.Flags().StringVar(&reason, "reason", "", fmt.Sprintf("why the workspace is frozen (required, at most %d characters); every refused write shows it", tenancy.MaxFrozenReason))
	unfreeze := &cobra.Command{
		Use:   "unfreeze NAME|PATH",
		Short: "Make a frozen workspace writable again",
		Long: `Unfreeze a workspace frozen with 'ws freeze': remove spec.frozen of its
Workspace in the parent (which needs the parent's "update" on it, as
freezing does) and wait until the Workspace reports it. A workspace being
restored stays read-only until the restore ends.`,
		Example: `  kubectl ws unfreeze team-a
  kubectl ws unfreeze root:org:team-a`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.freeze(cmd.OutOrStdout(), args[0], "", true)
		},
	}
	return []*cobra.Command{freeze, unfreeze}
}

// freeze freezes the workspace arg with reason, or unfreezes it.
func (o *wsOptions) freeze(out io.Writer, arg, reason string, unfreeze bool) error {
	if !unfreeze {
		reason = strings.TrimSpace(reason)
		if reason == "" {
			return fmt.Errorf("--reason is required: say why the workspace is frozen (every refused write shows it)")
		}
		if n := utf8.RuneCountInString(reason); n > tenancy.MaxFrozenReason {
			return fmt.Errorf("--reason is %d characters long, at most %d are allowed", n, tenancy.MaxFrozenReason)
		}
	}
	s, err := o.load()
	if err != nil {
		return err
	}
	target, err := s.resolve(arg)
	if err != nil {
		return err
	}
	parent, ok := target.Parent()
	if !ok || target == logicalcluster.Root {
		return fmt.Errorf("%s has no Workspace object (no parent) and cannot be frozen", target)
	}
	dyn, err := dynamic.NewForConfig(s.config(parent))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout+5*time.Second)
	defer cancel()
	if err := tenancy.SetFrozen(ctx, dyn, target.Base(), reason, o.timeout); err != nil {
		verb := "freezing"
		if unfreeze {
			verb = "unfreezing"
		}
		return fmt.Errorf("%s workspace %q: %v", verb, target, err)
	}
	if unfreeze {
		fmt.Fprintf(out, "Workspace %q is unfrozen: writes are allowed again.\n", target)
	} else {
		fmt.Fprintf(out, "Workspace %q is frozen (read-only): %s\n", target, reason)
	}
	return nil
}
