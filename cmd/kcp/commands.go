package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	genericfeatures "k8s.io/apiserver/pkg/features"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	"k8s.io/component-base/version"
	_ "k8s.io/kubernetes/pkg/features" // registers the Kubernetes feature gates

	"github.com/kcpsql/kcp/migrations"
	"github.com/kcpsql/kcp/server"
	"github.com/kcpsql/kcp/storage/datastore"
)

func init() {
	utilruntime.Must(logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate))
	// Upstream's object-size estimate for priority and fairness keeps a map
	// entry for every key of every cached resource (about 125 bytes per
	// object, across all logical clusters). Without it, the cost of a list
	// is estimated from object counts, as before Kubernetes 1.34.
	utilruntime.Must(utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(genericfeatures.SizeBasedListCostEstimate): false}))
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "kcp",
		Short: "kcp on SQL: many isolated logical Kubernetes clusters in one process, stored in SQLite or PostgreSQL",
		Long: `kcp on SQL serves thousands of logical clusters from one process. Each logical
cluster looks like a whole Kubernetes cluster to kubectl and client-go and is
reached under https://<server>/clusters/<path>/ (root without a prefix).
Everything is stored through an embedded kine in one SQLite file or in PostgreSQL.`,
		SilenceUsage: true,
	}
	root.AddCommand(newStartCommand(), newMigrateCommand(), newSQLCommand(), newExportCommand(), newImportCommand(), newCompatCommand(), newSnapshotCommand(), newRestoreCommand(), newFrontProxyCommand(), newVersionCommand())
	return root
}

func newStartCommand() *cobra.Command {
	o := server.NewOptions()
	cmd := &cobra.Command{
		Use:   "start",
		Short: "Start the server",
		Long: `Start the kcp server.

On first start kcp creates --root-dir with a CA, a serving certificate for
127.0.0.1 and localhost, an admin client certificate (group system:masters),
a service-account signing key and admin.kubeconfig, and it migrates the
datastore. Later starts reuse all of it. Use the server with:

  export KUBECONFIG=.kcp/admin.kubeconfig PATH=$PWD/bin:$PATH
  kubectl get namespaces                 # the root logical cluster
  kubectl ws create team-a --enter       # a workspace: a logical cluster of its own
  kubectl get namespaces                 # now in root:team-a

Any client reaches a workspace at https://127.0.0.1:6443/clusters/<path>.

Memory: a start fills the caches with every stored object, and the process
needs about twice what it keeps while it does (about 36 KiB per workspace,
16-18 KiB once settled). In a container with a memory limit, kcp sets Go's
soft memory limit to 0.9 of it (--memory-limit-ratio) so that the
collector works harder instead of the process being killed; elsewhere, with
hundreds of thousands of workspaces, set GOMEMLIMIT a little below the
machine's memory: a 1,000,000-workspace server started in 24 GiB with
GOMEMLIMIT=19GiB (docs/operations.md).`,
		SilenceUsage: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			rest.SetDefaultWarningHandler(rest.NoWarnings{})
			return nil
		},
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := logsapi.ValidateAndApply(o.Upstream.Logs, utilfeature.DefaultFeatureGate); err != nil {
				return err
			}
			ctx := genericapiserver.SetupSignalContext()
			completed, err := o.Complete(ctx)
			if err != nil {
				return err
			}
			if errs := completed.Validate(); len(errs) != 0 {
				return utilerrors.NewAggregate(errs)
			}
			return server.Run(ctx, completed)
		},
	}
	var fss cliflag.NamedFlagSets
	o.AddFlags(&fss)
	globalflag.AddGlobalFlags(fss.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	for _, f := range fss.FlagSets {
		cmd.Flags().AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, fss, cols)
	return cmd
}

func newMigrateCommand() *cobra.Command {
	rootDir, ds := ".kcp", ""
	cmd := &cobra.Command{
		Use:   "migrate [up|version]",
		Short: "Migrate the datastore's SQL schema (up, the default) or print its version",
		Long: `Migrate the datastore's SQL schema with the migrations built into this binary.
'kcp start' migrates on its own; run this to upgrade a database ahead of a
rolling restart or to check which schema version a database has.`,
		Args:      cobra.MaximumNArgs(1),
		ValidArgs: []string{"up", "version"},
		RunE: func(cmd *cobra.Command, args []string) error {
			action := "up"
			if len(args) == 1 {
				action = args[0]
			}
			abs, err := filepath.Abs(rootDir)
			if err != nil {
				return err
			}
			d, err := datastore.Parse(ds, abs)
			if err != nil {
				return err
			}
			ctx := context.Background()
			var st migrations.Status
			switch action {
			case "up":
				if err := d.Prepare(ctx); err != nil {
					return err
				}
				st, err = migrations.Up(ctx, d)
			case "version":
				st, err = migrations.Version(ctx, d)
			default:
				return fmt.Errorf("unknown action %q: use 'up' or 'version'", action)
			}
			if err != nil {
				return err
			}
			dirty := ""
			if st.Dirty {
				dirty = " (dirty: a migration failed half-way; fix the database, then run 'kcp migrate up' again)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "datastore %s: schema version %d of %d%s\n", d, st.Version, st.Latest, dirty)
			return nil
		},
	}
	cmd.Flags().StringVar(&rootDir, "root-dir", rootDir, "kcp's state directory; the default SQLite file is <root-dir>/kcp.db")
	cmd.Flags().StringVar(&ds, "datastore", ds, "sqlite:///path/file.db or postgres://user@host:5432/dbname (default: <root-dir>/kcp.db)")
	return cmd
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			v := version.Get()
			fmt.Fprintf(cmd.OutOrStdout(), "kcp %s (Kubernetes APIs %s, %s)\n", kcpVersion, v.GitVersion, v.GoVersion)
		},
	}
}

var kcpVersion = "v0.1.0-dev"
