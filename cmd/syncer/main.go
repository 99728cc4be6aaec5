// Command syncer connects one physical cluster to its SyncTarget in kcp
// (pull mode: it runs beside the physical cluster and dials kcp). It
// reports the cluster's health, version and capacity (the SyncTarget's
// status and Ready condition), and runs the objects kcp assigns to the
// target there: spec down, status up, deletion down first.
//
//	syncer --kcp-kubeconfig kcp.kubeconfig --sync-target pc1 [--kubeconfig physical.kubeconfig]
package main

import (
	"context"
	"fmt"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcpsql/kcp/schema/workload"
	"github.com/kcpsql/kcp/server/panics"
	"github.com/kcpsql/kcp/syncer"
)

func main() {
	fs := pflag.NewFlagSet("syncer", pflag.ExitOnError)
	kcpConfig := fs.String("kcp-kubeconfig", "", "kubeconfig for kcp, pointing at the workspace that holds the SyncTarget (required)")
	kcpContext := fs.String("kcp-context", "", "context in --kcp-kubeconfig (default: its current context)")
	target := fs.String("sync-target", "", "name of the SyncTarget this physical cluster is (required)")
	downstream := fs.String("kubeconfig", "", "kubeconfig for the physical cluster; empty: in-cluster configuration")
	workers := fs.Int("workers", 8, "objects synced in parallel")
	resources := fs.StringSlice("resources", nil, "more resources to sync besides Deployments, Services, Ingresses, ConfigMaps, Secrets and ServiceAccounts: names of CustomResourceDefinitions of the physical cluster (<plural>.<group>, comma-separated); their definitions are reported to kcp, which serves the least common denominator of every SyncTarget's in the workspaces placed on them")
	qps := fs.Float32("qps", 50, "requests per second the syncer may send to kcp, and to the physical cluster (each)")
	burst := fs.Int("burst", 100, "bursts above --qps allowed")
	debugAddr := fs.String("debug-address", "", "serve Go's /debug/pprof on this address (for example 127.0.0.1:6060); empty: off")
	outOfCapacity := fs.Duration("out-of-capacity-after", syncer.DefaultOutOfCapacityAfter, "report the physical cluster out of capacity (SyncTarget condition OutOfCapacity; kcp then taints it workload.kcp.io/out-of-capacity:NoSchedule, so new namespaces go elsewhere) once a pod of kcp's workloads has been unschedulable this long")
	interval := fs.Duration("heartbeat-interval", 5*time.Second, "how often to report health and capacity; keep it well below the SyncTarget's heartbeat timeout (kcp start --synctarget-heartbeat-timeout, default 20s: four missed heartbeats)")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "syncer connects one physical Kubernetes cluster to its SyncTarget in kcp.\n\nUsage:\n  syncer --kcp-kubeconfig FILE --sync-target NAME [--kubeconfig FILE]\n\nFlags:\n%s", fs.FlagUsages())
	}
	fs.Parse(os.Args[1:])
	// One tenant's object must not stop the syncer for every other.
	panics.Install()
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
	// client-go's default of 5 requests per second would pace a syncer of
	// many workspaces to minutes behind.
	up.QPS, up.Burst, down.QPS, down.Burst = *qps, *burst, *qps, *burst
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
	// The SyncTarget's spec.resources, and --resources.
	names := append([]string{}, *resources...)
	if st, err := upClient.Resource(workload.SyncTargetsResource).Get(context.Background(), *target, metav1.GetOptions{}); err == nil {
		more, _, _ := unstructured.NestedStringSlice(st.Object, "spec", "resources")
		names = append(names, more...)
	}
	grs, err := syncer.ParseResources(names)
	if err != nil {
		fail("%v", err)
	}
	ext, err := apiextensionsclient.NewForConfig(down)
	if err != nil {
		fail("%v", err)
	}
	imports, err := syncer.ResolveImports(ctx, ext, grs)
	if err != nil {
		fail("%v", err)
	}
	synced := append([]schema.GroupVersionResource{}, workload.SyncedResources...)
	for _, imp := range imports {
		synced = append(synced, imp.Storage)
	}
	s, err := syncer.NewSyncer(up, *target, down, synced)
	if err != nil {
		fail("%v", err)
	}
	// The built-in workload kinds are imported too: kcp negotiates what
	// every physical cluster of the location accepts.
	go syncer.ReportImports(ctx, upClient, *target, ext, append(syncer.BuiltInImports(), imports...), 30*time.Second)
	fmt.Fprintf(os.Stderr, "syncer: reporting physical cluster %s as SyncTarget %s at %s every %s, and syncing %d resources\n", down.Host, *target, up.Host, *interval, len(synced))
	if *debugAddr != "" {
		go func() {
			if err := http.ListenAndServe(*debugAddr, nil); err != nil {
				fmt.Fprintf(os.Stderr, "syncer: --debug-address: %v\n", err)
			}
		}()
	}
	s.OutOfCapacityAfter = *outOfCapacity
	go s.Run(ctx, *workers)
	// The tunnel kcp sends the target's pods' logs, exec, attach and
	// port-forward streams through.
	go syncer.RunTunnel(ctx, up, *target, down)
	syncer.Heartbeat(ctx, upClient, *target, downClient, *interval, synced, s.CaughtUp, s.SetTarget)
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "syncer: "+format+"\n", a...)
	os.Exit(1)
}
