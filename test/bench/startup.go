package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

var (
	startupRounds = flag.Int("startup", 0, "only measure start-up (issue 56): this many rounds per datastore of a cold start (new root directory and database) to /readyz, then a warm start on the same data; 0 skips")
	startupBefore = flag.String("startup-before", "", "a kcp binary of an earlier build to start in turn with -kcp in every round, side by side")
)

type startupResult struct {
	bin, datastore string
	cold, warm     []time.Duration
}

// benchStartup starts each binary in turn, round after round, so that the
// machine's load falls on both alike.
func benchStartup(log func(string, ...any)) ([]startupResult, error) {
	bins := []string{""}
	if *startupBefore != "" {
		bins = []string{*startupBefore, ""}
	}
	var out []startupResult
	for _, ds := range []string{"sqlite", "postgres"} {
		if ds == "postgres" && *pgDSN == "" {
			continue
		}
		rs := make([]startupResult, len(bins))
		for i, bin := range bins {
			rs[i] = startupResult{bin: bin, datastore: ds}
		}
		for round := 0; round < *startupRounds; round++ {
			for i, bin := range bins {
				cold, warm, err := startupOnce(bin, ds)
				if err != nil {
					return nil, err
				}
				log("%s %s round %d: cold %s, warm %s", ds, binName(bin), round+1, cold.Round(time.Millisecond), warm.Round(time.Millisecond))
				rs[i].cold = append(rs[i].cold, cold)
				rs[i].warm = append(rs[i].warm, warm)
			}
		}
		out = append(out, rs...)
	}
	return out, nil
}

func startupOnce(bin, ds string) (time.Duration, time.Duration, error) {
	tmp, err := os.MkdirTemp("", "kcp-bench-startup-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(tmp)
	s := &server{bin: bin, dir: filepath.Join(tmp, "root"), port: freePort()}
	if ds == "postgres" {
		dsn, drop, err := freshPostgres()
		if err != nil {
			return 0, 0, err
		}
		defer drop()
		s.ds = dsn
	}
	cold, err := s.start()
	if err != nil {
		return 0, 0, err
	}
	// Idle a moment, as an operator's restart would find it.
	time.Sleep(2 * time.Second)
	s.stop()
	warm, err := s.start()
	if err != nil {
		return 0, 0, err
	}
	s.stop()
	return cold, warm, nil
}

func renderStartup(rs []startupResult) string {
	var b strings.Builder
	b.WriteString("| datastore | binary | rounds | cold start to /readyz, median (min-max) | warm start, median (min-max) |\n|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s |\n", r.datastore, binName(r.bin), len(r.cold), spread(r.cold), spread(r.warm))
	}
	return b.String()
}

func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return ""
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	r := func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
	return fmt.Sprintf("%s (%s-%s)", r(s[len(s)/2]), r(s[0]), r(s[len(s)-1]))
}
