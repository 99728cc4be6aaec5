// Command kineserver runs the same embedded kine kcp uses, on its own, so
// that the benchmark can put an upstream kube-apiserver on kine/SQLite:
//
//	kineserver -dir DIR      # prints the etcd endpoint (unix://DIR/kine.sock), serves until SIGTERM
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kcpsql/kcp/migrations"
	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/embeddedkine"
)

func main() {
	dir := flag.String("dir", "", "directory for kcp.db and kine.sock")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "kineserver: -dir is required")
		os.Exit(2)
	}
	ctx := context.Background()
	ds, err := datastore.Parse("", *dir)
	if err == nil {
		err = ds.Prepare(ctx)
	}
	if err == nil {
		_, err = migrations.Up(ctx, ds)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kineserver:", err)
		os.Exit(1)
	}
	k, err := embeddedkine.Start(embeddedkine.NewConfig(ds, *dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kineserver:", err)
		os.Exit(1)
	}
	fmt.Println(k.Endpoint)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	k.Stop()
}
