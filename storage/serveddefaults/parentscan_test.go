package serveddefaults

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kineserver "github.com/k3s-io/kine/pkg/server"
)

// rowsBackend answers List from fixed rows and counts the lists of the
// namespaces' range; each takes a moment, as a scan of many rows does.
type rowsBackend struct {
	kineserver.Backend
	rows           []*kineserver.KeyValue
	namespaceReads atomic.Int32
	fail           atomic.Bool // the next read of the namespaces fails
}

func (r *rowsBackend) List(_ context.Context, key, end string, limit, revision int64, _ bool) (int64, []*kineserver.KeyValue, error) {
	if strings.HasPrefix(key, namespaces.prefix) {
		r.namespaceReads.Add(1)
		time.Sleep(50 * time.Millisecond)
		if r.fail.Swap(false) {
			return 0, nil, errors.New("the datastore is unreachable")
		}
	}
	var out []*kineserver.KeyValue
	for _, kv := range r.rows {
		if kv.Key >= key && kv.Key < end && (limit <= 0 || int64(len(out)) < limit) {
			out = append(out, kv)
		}
	}
	return 10, out, nil
}

// The service accounts' and the config maps' lists of all clusters at one
// revision read the namespaces once between them, and each still holds
// every namespace's default; at another revision they are read again.
func TestListsShareTheParentScan(t *testing.T) {
	rb := &rowsBackend{}
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("ns%d", i)
		rb.rows = append(rb.rows, &kineserver.KeyValue{Key: namespaces.prefix + "c/" + name, CreateRevision: int64(i + 1), ModRevision: int64(i + 1),
			Value: []byte(fmt.Sprintf(`{"metadata":{"name":%q,"uid":"u%d","creationTimestamp":"2026-01-01T00:00:00Z"},"status":{"phase":"Active"}}`, name, i))})
	}
	b := New(rb, "CA")
	ctx := context.Background()
	lists := func(rev int64) {
		var wg sync.WaitGroup
		for _, prefix := range []string{"/registry/core/serviceaccounts/", "/registry/core/configmaps/"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, kvs, err := b.List(ctx, prefix, prefix[:len(prefix)-1]+"0", 0, rev, false)
				if err != nil {
					t.Error(err)
					return
				}
				if len(kvs) != 3 {
					t.Errorf("list of %s at %d: %d objects, want the 3 namespaces' defaults", prefix, rev, len(kvs))
				}
			}()
		}
		wg.Wait()
	}
	lists(10)
	if n := rb.namespaceReads.Load(); n != 1 {
		t.Errorf("two lists at one revision read the namespaces %d times, want once", n)
	}
	lists(9)
	if n := rb.namespaceReads.Load(); n != 2 {
		t.Errorf("after two lists at another revision the namespaces were read %d times, want 2", n)
	}
	// A failed read is not kept for later lists at its revision.
	rb.fail.Store(true)
	if _, _, err := b.List(ctx, "/registry/core/serviceaccounts/", "/registry/core/serviceaccounts0", 0, 8, false); err == nil {
		t.Fatal("a list whose read of the namespaces failed succeeded")
	}
	if _, kvs, err := b.List(ctx, "/registry/core/serviceaccounts/", "/registry/core/serviceaccounts0", 0, 8, false); err != nil || len(kvs) != 3 {
		t.Errorf("the list after a failed read at the same revision: %d objects, %v", len(kvs), err)
	}
}
