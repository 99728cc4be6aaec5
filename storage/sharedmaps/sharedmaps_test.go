package sharedmaps

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// same reports whether a and b are the same map (not only equal).
func same(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func TestOfSharesFromTheSecondEqualMap(t *testing.T) {
	label := fmt.Sprintf("of-%p", t)
	first, second, third := map[string]string{"k": label}, map[string]string{"k": label}, map[string]string{"k": label}
	if got := Of(first); !same(got, first) {
		t.Fatal("the first map of a content must be returned as it is")
	}
	if got := Of(second); !same(got, second) {
		t.Fatal("the second map of a content becomes the shared one")
	}
	if got := Of(third); !same(got, second) {
		t.Fatal("a third equal map must get the shared one")
	}
}

func TestCopyNeverHandsBackTheCallersMap(t *testing.T) {
	label := fmt.Sprintf("copy-%p", t)
	var got []map[string]string
	var in []map[string]string
	for range 3 {
		m := map[string]string{"k": label}
		in = append(in, m)
		got = append(got, Copy(m))
	}
	for i := range got {
		if same(got[i], in[i]) {
			t.Fatalf("Copy %d returned the caller's own map", i)
		}
		if !reflect.DeepEqual(got[i], in[i]) {
			t.Fatalf("Copy %d = %v, want %v", i, got[i], in[i])
		}
	}
	// From the second one on, the content is shared: the third Copy makes
	// no map of its own, and Of hands out the same one.
	if !same(got[2], got[1]) || !same(Of(map[string]string{"k": label}), got[1]) {
		t.Fatal("equal maps must share one copy from the second on")
	}
	// Changing a caller's map afterwards changes nothing handed out.
	in[1]["k"] = "changed"
	if got[1]["k"] != label || got[2]["k"] != label {
		t.Fatal("a copy changed with the caller's map")
	}
}

func TestCopyOfEmptyAndLargeMaps(t *testing.T) {
	if got := Copy(nil); got != nil {
		t.Fatalf("Copy(nil) = %v, want nil", got)
	}
	empty := map[string]string{}
	if got := Copy(empty); got == nil || len(got) != 0 || same(got, empty) {
		t.Fatal("Copy of an empty map must be another empty map, not nil")
	}
	large := map[string]string{"k": strings.Repeat("x", MaxBytes)}
	if got := Copy(large); same(got, large) || !reflect.DeepEqual(got, large) {
		t.Fatal("Copy of a map too large to share must be an equal copy")
	}
	many := map[string]string{}
	for i := range MaxEntries + 1 {
		many[fmt.Sprint(i)] = "v"
	}
	if got := Copy(many); same(got, many) || !reflect.DeepEqual(got, many) {
		t.Fatal("Copy of a map with too many entries must be an equal copy")
	}
}
