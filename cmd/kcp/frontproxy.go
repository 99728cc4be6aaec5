package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/server/frontproxy"
	"github.com/kcpsql/kcp/server/pki"
	"github.com/kcpsql/kcp/server/shards"
)

func newFrontProxyCommand() *cobra.Command {
	var shardsFile, rootDir, bind string
	var port int
	limits := frontproxy.DefaultLimits
	cmd := &cobra.Command{
		Use:   "front-proxy",
		Short: "Serve several shards behind one address: route each workspace's requests to the shard that holds it",
		Long: `Serve an installation of several shards (kcp start --shards-file) behind one
address. Each request to /clusters/<path>/... goes to the shard that holds that
workspace, for every verb: lists, watches, and exec, attach, port-forward and
logs streams. Requests without a /clusters/ prefix go to the root shard (or, with
a service-account token, to the workspace the token was issued in).

The front proxy keeps no state: it learns where each workspace lives from one
watch of LogicalClusters per shard, so run as many replicas as you like. It
reads the same shards file as the shards and needs their CA: copy ca.crt and
ca.key of the installation into --root-dir before the first start. It issues
itself a serving certificate, a client certificate the shards believe its
request headers from (system:kcp:front-proxy), and an admin.kubeconfig that
points at the proxy.

Clients authenticate as they would at a shard: a client certificate of the
installation's CA is checked here and passed on in request headers; a bearer
token is passed on and checked by the shard. Request headers X-Remote-* sent
by clients are removed. A shard that cannot be reached is answered with 503
and Retry-After for its workspaces only.

What the proxy holds at once is bounded: short requests and long-running ones
(watches, exec, attach, port-forward, logs -f) each have a bound in all and a
share of it that one workspace may hold; a request over a bound is answered 429
with Retry-After at once (client-go retries it).

  kcp front-proxy --shards-file shards.yaml --root-dir .kcp-proxy --secure-port 6443
  export KUBECONFIG=.kcp-proxy/admin.kubeconfig
  kubectl ws create team-a --enter`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := limits.Validate(); err != nil {
				return err
			}
			if shardsFile == "" {
				return fmt.Errorf("--shards-file is required: the file every shard of the installation reads")
			}
			cfg, err := shards.Load(shardsFile)
			if err != nil {
				return err
			}
			root, err := filepath.Abs(rootDir)
			if err != nil {
				return err
			}
			files := pki.Files{Dir: root}
			if _, err := os.Stat(files.CAKey()); err != nil {
				return fmt.Errorf("%s: the front proxy needs the installation's CA (ca.crt and ca.key, as the shards have them) in --root-dir", files.CAKey())
			}
			addr := net.JoinHostPort(bind, fmt.Sprint(port))
			host := bind
			if ip := net.ParseIP(bind); ip == nil || ip.IsUnspecified() {
				host = "127.0.0.1"
			}
			hosts := []string{"127.0.0.1", "localhost", "::1"}
			if host != "127.0.0.1" {
				hosts = append(hosts, host)
			}
			if hn, err := os.Hostname(); err == nil && hn != "" {
				hosts = append(hosts, hn)
			}
			self := "https://" + net.JoinHostPort(host, fmt.Sprint(port))
			if err := pki.Ensure(files, hosts, self); err != nil {
				return err
			}
			if err := shards.EnsureProxyCert(files); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ca, crt, key := shards.ProxyTLS(files)
			p, err := frontproxy.New(ctx, cfg, frontproxy.Credentials{CAFile: ca, CertFile: crt, KeyFile: key,
				Reader: func(s shards.Shard) *rest.Config {
					return &rest.Config{Host: s.URL, TLSClientConfig: rest.TLSClientConfig{CAFile: files.CACert(), CertFile: files.AdminCert(), KeyFile: files.AdminKey()},
						QPS: 20, Burst: 40, UserAgent: "kcp-front-proxy"}
				}})
			if err != nil {
				return err
			}
			caPEM, err := os.ReadFile(files.CACert())
			if err != nil {
				return err
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(caPEM)
			serving, err := tls.LoadX509KeyPair(files.ServingCert(), files.ServingKey())
			if err != nil {
				return err
			}
			srv := &http.Server{Addr: addr, Handler: frontproxy.Limit(p, limits), ReadHeaderTimeout: 30 * time.Second,
				TLSConfig: &tls.Config{Certificates: []tls.Certificate{serving}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			go func() {
				<-ctx.Done()
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = srv.Shutdown(sctx)
			}()
			go func() {
				start := time.Now()
				for !p.Ready() && ctx.Err() == nil {
					time.Sleep(50 * time.Millisecond)
				}
				klog.InfoS("kcp front proxy is ready", "address", self, "shards", cfg.Names(), "kubeconfig", files.AdminKubeconfig(), "took", time.Since(start).Round(time.Millisecond))
			}()
			if err := srv.ServeTLS(ln, "", ""); err != nil && err != http.ErrServerClosed {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&shardsFile, "shards-file", "", "The shards file every shard of the installation reads (kcp start --shards-file).")
	cmd.Flags().StringVar(&rootDir, "root-dir", ".kcp-front-proxy", "Directory with the installation's CA (ca.crt, ca.key); the proxy's certificates and admin.kubeconfig are written there.")
	cmd.Flags().StringVar(&bind, "bind-address", "127.0.0.1", "Address to listen on.")
	cmd.Flags().IntVar(&port, "secure-port", 6443, "Port to listen on (HTTPS).")
	cmd.Flags().IntVar(&limits.Requests, "max-requests-inflight", limits.Requests, "The most short requests (get, list, create, update, delete, ...) the proxy holds at once; more are answered 429 with Retry-After. 0: no bound.")
	cmd.Flags().IntVar(&limits.LongRunning, "max-long-running-inflight", limits.LongRunning, "The most watches and streams (exec, attach, port-forward, logs -f) the proxy holds at once; more are answered 429 with Retry-After. 0: no bound.")
	cmd.Flags().IntVar(&limits.PerWorkspace, "max-inflight-per-workspace-percent", limits.PerWorkspace, "The share (percent) of each of the two bounds one workspace (or all reads across workspaces, /clusters/*) may hold, so that one tenant cannot take every slot.")
	return cmd
}
