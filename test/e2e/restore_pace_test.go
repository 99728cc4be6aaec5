package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kcpsql/kcp/test/e2e/framework"
)

// TestRestorePaced: with kcp start --restore-writes-per-second, a restore
// in place, one --into another workspace and one --from a snapshot file
// write at that pace, and `kcp restore` shows their progress as they go
// (done/total moving up between 0 and the total) and why they take the
// time they take; each ends with the workspace as it was.
func TestRestorePaced(t *testing.T) {
	for _, d := range framework.Dialects {
		t.Run(string(d), func(t *testing.T) {
			// 300 writes at 100 a second: about 3 s per restore, the status
			// written every second.
			const n, perSecond = 300, 100
			s := framework.StartServer(t, framework.DatastoreFor(t, d), "--change-history", fmt.Sprintf("--restore-writes-per-second=%d", perSecond))
			a := "root:paced"
			s.CreateWorkspaces(a)
			ctx := context.Background()
			cfg := s.Config(a)
			cfg.QPS, cfg.Burst = 500, 1000
			cms := dynamic.NewForConfigOrDie(cfg).Resource(compared[1]).Namespace("default")
			parallel(t, n, func(i int) error {
				_, err := cms.Create(ctx, &unstructured.Unstructured{Object: map[string]interface{}{
					"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]interface{}{"name": fmt.Sprintf("cm-%d", i)},
					"data":     map[string]interface{}{"v": fmt.Sprint(i)},
				}}, metav1.CreateOptions{})
				return err
			})
			before := restoreState(t, s, a)
			kcp, _ := framework.Binaries(t)
			file := t.TempDir() + "/paced.snap"
			args := []string{"snapshot", a, "-o", file, "--root-dir", s.RootDir}
			if s.Datastore != "" {
				args = append(args, "--datastore", s.Datastore)
			}
			if out, err := exec.Command(kcp, args...).CombinedOutput(); err != nil {
				t.Fatalf("kcp snapshot: %v\n%s", err, out)
			}
			time.Sleep(1100 * time.Millisecond)
			point := time.Now().UTC().Format(time.RFC3339)
			time.Sleep(1100 * time.Millisecond)
			parallel(t, n, func(i int) error {
				_, err := cms.Patch(ctx, fmt.Sprintf("cm-%d", i), "application/merge-patch+json", []byte(`{"data":{"v":"overwritten"}}`), metav1.PatchOptions{})
				return err
			})

			out, err := kcpRestore(t, s, a, "--to", point)
			if err != nil {
				t.Fatalf("kcp restore: %v\n%s\n%s", err, out, s.LogTail(40))
			}
			checkPacedOutput(t, "kcp restore in place", out, n, perSecond)
			if diffs := diffStates(before, restoreState(t, s, a)); len(diffs) > 0 {
				t.Errorf("after the paced restore in place:\n%s", strings.Join(firstDiffs(diffs), "\n"))
			}

			out, err = kcpRestore(t, s, a, "--to", point, "--into", "root:paced-into")
			if err != nil {
				t.Fatalf("kcp restore --into: %v\n%s\n%s", err, out, s.LogTail(40))
			}
			checkPacedOutput(t, "kcp restore --into", out, n, perSecond)
			if diffs := diffStates(withoutServed(withoutIdentity(before)), withoutServed(withoutIdentity(restoreState(t, s, "root:paced-into")))); len(diffs) > 0 {
				t.Errorf("after the paced restore --into:\n%s", strings.Join(firstDiffs(diffs), "\n"))
			}

			from := []string{"--from", file, "--into", "root:paced-copy", "--root-dir", s.RootDir}
			if s.Datastore != "" {
				from = append(from, "--datastore", s.Datastore)
			}
			out, err = kcpRestore(t, s, from...)
			if err != nil {
				t.Fatalf("kcp restore --from: %v\n%s\n%s", err, out, s.LogTail(40))
			}
			checkPacedOutput(t, "kcp restore --from", out, n, perSecond)
			if diffs := diffStates(withoutServed(withoutIdentity(before)), withoutServed(withoutIdentity(restoreState(t, s, "root:paced-copy")))); len(diffs) > 0 {
				t.Errorf("after the paced restore --from:\n%s", strings.Join(firstDiffs(diffs), "\n"))
			}
		})
	}
}

var progressLine = regexp.MustCompile(`\((\d+)/(\d+)\)$`)

// checkPacedOutput: the restore succeeded, its status named the pace, and
// the progress it showed was seen between 0 and the total (at least n
// writes) without going back.
func checkPacedOutput(t *testing.T, what, out string, n, perSecond int) {
	t.Helper()
	framework.MustContain(t, what+"'s output", out, "Succeeded", fmt.Sprintf("at most %d writes a second (the server's --restore-writes-per-second)", perSecond))
	midway := false
	lastDone, lastTotal := -1, -1
	for _, line := range strings.Split(out, "\n") {
		m := progressLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		done, _ := strconv.Atoi(m[1])
		total, _ := strconv.Atoi(m[2])
		if total == lastTotal && done < lastDone {
			t.Errorf("%s: progress went back from %d to %d of %d:\n%s", what, lastDone, done, total, out)
		}
		if total >= n && done > 0 && done < total {
			midway = true
		}
		lastDone, lastTotal = done, total
	}
	if !midway {
		t.Errorf("%s: no progress shown between 0 and the total of a paced restore of at least %d writes:\n%s", what, n, out)
	}
}

func firstDiffs(diffs []string) []string {
	if len(diffs) > 10 {
		return append(diffs[:10:10], fmt.Sprintf("... %d in all", len(diffs)))
	}
	return diffs
}

// withoutServed drops the creation time of every namespace's service
// account "default": it is served by the storage layer, not stored, so a
// restore into another workspace does not carry it, and it is as old as
// that workspace's namespace, which can be a second or more apart from the
// source's.
func withoutServed(state map[string]map[string]interface{}) map[string]map[string]interface{} {
	for k, v := range state {
		if strings.HasPrefix(k, "serviceaccounts ") && strings.HasSuffix(k, "/default") {
			u := &unstructured.Unstructured{Object: v}
			unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
		}
	}
	return state
}
