// Command physical-cluster starts local physical Kubernetes clusters
// (kube-apiserver, kube-controller-manager, kube-scheduler, kine and KWOK
// fake nodes; see test/physical) for trying the multi-cluster walk-through
// by hand, and stops them on Ctrl-C:
//
//	go run ./test/tools/physical-cluster -dir .physical -clusters 2
//
// Each cluster's kubeconfig is written to <dir>/<name>/<name>.kubeconfig;
// running it again on the same -dir brings the clusters back with their state.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/kcpsql/kcp/test/physical"
)

func main() {
	dir := flag.String("dir", ".physical", "directory for the clusters' state, one subdirectory each")
	n := flag.Int("clusters", 1, "how many clusters to start (named pc1, pc2, ...)")
	nodes := flag.Int("nodes", 3, "fake nodes per cluster")
	flag.Parse()
	log := func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
	bins, err := physical.EnsureBinaries(log)
	if err != nil {
		log("%v", err)
		os.Exit(1)
	}
	ctx := context.Background()
	var clusters []*physical.Cluster
	stopAll := func() {
		for _, c := range clusters {
			c.Stop()
		}
	}
	for i := 1; i <= *n; i++ {
		name := fmt.Sprintf("pc%d", i)
		abs, _ := filepath.Abs(filepath.Join(*dir, name))
		c, err := physical.Start(ctx, bins, physical.Options{Name: name, Dir: abs, Nodes: *nodes, Labels: map[string]string{"kcp.io/physical-cluster": name}, Log: log})
		if err != nil {
			log("%v", err)
			stopAll()
			os.Exit(1)
		}
		clusters = append(clusters, c)
		fmt.Printf("%s: export KUBECONFIG=%s\n", name, c.Kubeconfig)
	}
	log("running; Ctrl-C stops the clusters (their state stays in %s)", *dir)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	stopAll()
}
