package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kcpsql/kcp/storage/changehistory"
	"github.com/kcpsql/kcp/storage/datastore"
	"github.com/kcpsql/kcp/storage/logicalcluster"
	"github.com/kcpsql/kcp/storage/sqlreports"
)

func newSQLCommand() *cobra.Command {
	rootDir, ds, report, cluster, output, since := ".kcp", "", "", "", "table", "24h"
	timeout := 60 * time.Second
	var shardStores []string
	var reportHelp []string
	for _, n := range sqlreports.Names() {
		reportHelp = append(reportHelp, fmt.Sprintf("  %-10s %s", n, sqlreports.Reports[n].Help))
	}
	cmd := &cobra.Command{
		Use:   "sql [QUERY]",
		Short: "Run a read-only SQL query or a named report against the datastore",
		Long: `Run a read-only SQL query, or a named report, against the configured
datastore (SQLite file or PostgreSQL) and print the result. The query runs in
a read-only transaction (SQLite: a read-only connection): it cannot change
anything, also while a server runs on the same datastore. The views
kcp_objects and kcp_cluster_footprint are described in docs/sql-auditing.md.

Reports:
` + strings.Join(reportHelp, "\n"),
		Example: `  kcp sql --report tenants
  kcp sql --report footprint --cluster root:team-a -o json
  kcp sql "SELECT cluster, COUNT(*) FROM kine GROUP BY cluster"
  kcp sql --datastore postgres://postgres@127.0.0.1/kcp --report tenants -o csv
  kcp sql --shard root=postgres://db-1/kcp --shard eu-2=postgres://db-2/kcp --report tenants`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 1) == (report != "") {
				return fmt.Errorf("give either a QUERY or --report NAME (one of %s)", strings.Join(sqlreports.Names(), ", "))
			}
			if output != "table" && output != "json" && output != "csv" {
				return fmt.Errorf("unknown output %q: use table, json or csv", output)
			}
			abs, err := filepath.Abs(rootDir)
			if err != nil {
				return err
			}
			type target struct{ shard, datastore string }
			targets := []target{{"", ds}}
			if len(shardStores) > 0 {
				if ds != "" {
					return fmt.Errorf("give either --datastore or --shard NAME=DATASTORE (one per shard), not both")
				}
				targets = nil
				for _, s := range shardStores {
					name, store, ok := strings.Cut(s, "=")
					if !ok || name == "" || store == "" {
						return fmt.Errorf("--shard %q: want NAME=DATASTORE, e.g. eu-2=postgres://db-2/kcp", s)
					}
					targets = append(targets, target{name, store})
				}
			}
			var all *sqlreports.Result
			for _, tg := range targets {
				d, err := datastore.Parse(tg.datastore, abs)
				if err != nil {
					return err
				}
				res, err := runSQL(d, report, cluster, since, timeout, args)
				if err != nil {
					if tg.shard != "" {
						return fmt.Errorf("shard %s: %w", tg.shard, err)
					}
					return err
				}
				if tg.shard == "" {
					all = res
					break
				}
				// Every shard's rows, each with the shard it came from.
				if all == nil {
					all = &sqlreports.Result{Columns: append([]string{"shard"}, res.Columns...)}
				} else if strings.Join(all.Columns[1:], ",") != strings.Join(res.Columns, ",") {
					return fmt.Errorf("shard %s answered with columns %v, the shards before it with %v", tg.shard, res.Columns, all.Columns[1:])
				}
				for _, r := range res.Rows {
					all.Rows = append(all.Rows, append([]string{tg.shard}, r...))
				}
			}
			return printResult(cmd.OutOrStdout(), all, output)
		},
	}
	cmd.Flags().StringVar(&rootDir, "root-dir", rootDir, "kcp's state directory; the default SQLite file is <root-dir>/kcp.db")
	cmd.Flags().StringVar(&ds, "datastore", ds, "sqlite:///path/file.db or postgres://user@host:5432/dbname (default: <root-dir>/kcp.db)")
	cmd.Flags().StringVar(&report, "report", report, "named report: "+strings.Join(sqlreports.Names(), ", "))
	cmd.Flags().StringVar(&cluster, "cluster", cluster, "logical cluster for reports that need one, e.g. root:team-a")
	cmd.Flags().StringVarP(&output, "output", "o", output, "table, json or csv")
	cmd.Flags().StringVar(&since, "since", since, "for the changes report: a duration back from now (90m, 24h) or an RFC 3339 time")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "give up after this long")
	cmd.Flags().StringArrayVar(&shardStores, "shard", nil, "NAME=DATASTORE of one shard of an installation of several; repeat it for each: the query or report runs on every shard's datastore and the rows come back together, each with a first column shard")
	return cmd
}

// runSQL runs a query or a named report on one datastore.
func runSQL(d *datastore.Datastore, report, cluster, since string, timeout time.Duration, args []string) (*sqlreports.Result, error) {
	query, qargs := "", []any{}
	if report != "" {
		r, ok := sqlreports.Reports[report]
		if !ok {
			return nil, fmt.Errorf("unknown report %q: use one of %s", report, strings.Join(sqlreports.Names(), ", "))
		}
		if r.NeedsCluster {
			if cluster == "" {
				return nil, fmt.Errorf("report %q needs --cluster PATH", report)
			}
			if _, err := logicalcluster.Parse(cluster); err != nil {
				return nil, err
			}
			qargs = append(qargs, cluster)
		}
		if r.NeedsSince {
			t, err := parseSince(since)
			if err != nil {
				return nil, err
			}
			qargs = append(qargs, changehistory.Timestamp(d.Dialect, t))
		}
		query = r.SQL[d.Dialect]
	} else {
		query = args[0]
	}
	db, err := sqlreports.OpenReadOnly(d)
	if err != nil {
		return nil, fmt.Errorf("datastore %s: %v", d, err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := sqlreports.Query(ctx, db, d, query, qargs...)
	if err != nil {
		return nil, fmt.Errorf("datastore %s: %v", d, err)
	}
	return res, nil
}

// parseSince reads "90m" (before now) or an RFC 3339 time.
func parseSince(s string) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q is neither a duration (24h) nor an RFC 3339 time (2026-11-20T09:00:00Z)", s)
	}
	return t, nil
}

func printResult(w io.Writer, res *sqlreports.Result, output string) error {
	switch output {
	case "json":
		rows := make([]map[string]string, 0, len(res.Rows))
		for _, r := range res.Rows {
			m := make(map[string]string, len(r))
			for i, c := range res.Columns {
				m[c] = r[i]
			}
			rows = append(rows, m)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	case "csv":
		cw := csv.NewWriter(w)
		if err := cw.Write(res.Columns); err != nil {
			return err
		}
		if err := cw.WriteAll(res.Rows); err != nil {
			return err
		}
		cw.Flush()
		return cw.Error()
	default:
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.ToUpper(strings.Join(res.Columns, "\t")))
		for _, r := range res.Rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "(%d rows)\n", len(res.Rows))
		return nil
	}
}
