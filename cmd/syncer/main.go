// Command syncer connects one physical cluster to its SyncTarget in kcp
// (pull mode: it runs beside the physical cluster and dials kcp). Today it
// reports the cluster's health, version and capacity (the SyncTarget's
// status and Ready condition); syncing workloads follows.
//
//	syncer --kcp-kubeconfig kcp.kubeconfig --sync-target pc1 [--kubeconfig physical.kubeconfig]
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcpsql/kcp/syncer"
)

func main() {
	fs := pflag.NewFlagSet("syncer", pflag.ExitOnError)
	kcpConfig := fs.String("kcp-kubeconfig", "", "kubeconfig for kcp, pointing at the workspace that holds the SyncTarget (required)")
	kcpContext := fs.String("kcp-context", "", "context in --kcp-kubeconfig (default: its current context)")
	target := fs.String("sync-target", "", "name of the SyncTarget this physical cluster is (required)")
	downstream := fs.String("kubeconfig", "", "kubeconfig for the physical cluster; empty: in-cluster configuration")
	interval := fs.Duration("heartbeat-interval", 10*time.Second, "how often to report health and capacity; keep it well below the SyncTarget's heartbeat timeout (kcp start --synctarget-heartbeat-timeout, default 40s)")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "syncer connects one physical Kubernetes cluster to its SyncTarget in kcp.\n\nUsage:\n  syncer --kcp-kubeconfig FILE --sync-target NAME [--kubeconfig FILE]\n\nFlags:\n%s", fs.FlagUsages())
	}
	fs.Parse(os.Args[1:])
	if *kcpConfig == "" || *target == "" {
		fs.Usage()
		fmt.Fprintln(os.Stderr, "\nsyncer: --kcp-kubeconfig and --sync-target are required")
		os.Exit(2)
	}
	up, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: *kcpConfig},
		&clientcmd.ConfigOverrides{CurrentContext: *kcpContext}).ClientConfig()
	if err != nil {
		fail("reading --kcp-kubeconfig %s: %v", *kcpConfig, err)
	}
	var down *rest.Config
	if *downstream != "" {
		down, err = clientcmd.BuildConfigFromFlags("", *downstream)
	} else {
		down, err = rest.InClusterConfig()
	}
	if err != nil {
		fail("physical cluster configuration: %v (give --kubeconfig outside a cluster)", err)
	}
	upClient, err := dynamic.NewForConfig(up)
	if err != nil {
		fail("%v", err)
	}
	downClient, err := kubernetes.NewForConfig(down)
	if err != nil {
		fail("%v", err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	fmt.Fprintf(os.Stderr, "syncer: reporting physical cluster %s as SyncTarget %s at %s every %s\n", down.Host, *target, up.Host, *interval)
	syncer.Heartbeat(ctx, upClient, *target, downClient, *interval)
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "syncer: "+format+"\n", a...)
	os.Exit(1)
}
