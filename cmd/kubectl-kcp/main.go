// Command kubectl-kcp is the kubectl plugin for kcp on SQL: `kubectl kcp ws`
// creates, enters, lists and deletes workspaces by editing the server URL of
// the kubeconfig's current cluster; `kubectl kcp workload sync` registers a
// physical cluster and writes its syncer's credentials. Installed also as kubectl-ws, it is
// `kubectl ws`.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

func main() {
	// The display names make usage read "kubectl kcp ws use" and
	// "kubectl ws use": cobra builds it from the first word of each Use.
	root := &cobra.Command{
		Use:           "kcp",
		Short:         "Work with kcp on SQL logical clusters",
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl kcp"},
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	ws := newWorkspaceCommand()
	cmd := root
	if strings.HasPrefix(filepath.Base(os.Args[0]), "kubectl-ws") {
		// Installed as kubectl-ws, the workspace command is the root.
		ws.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl ws"}
		ws.SilenceUsage, ws.SilenceErrors = true, true
		cmd = ws
	} else {
		root.AddCommand(ws, newWorkloadCommand(), newBindCommand())
	}
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
