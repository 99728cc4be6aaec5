package syncerview

import (
	"encoding/json"
	"testing"

	"github.com/kcpsql/kcp/schema/workload"
)

func TestOwnAnnotation(t *testing.T) {
	own := workload.StatusAnnotationPrefix + "k1"
	for body, want := range map[string]bool{
		`{"annotations":{"` + own + `":"{}"}}`:                                                        true,
		`{"annotations":{"` + workload.StatusAnnotationPrefix + `k2":"{}"}}`:                          false, // another target's
		`{"annotations":{"` + own + `":"{}","app":"x"}}`:                                              false, // and something else
		`{"annotations":{"` + own + `":"{}"},"labels":{"` + workload.StateLabelPrefix + `x":"Sync"}}`: false,
		`{"annotations":{"` + own + `":null}}`:                                                        false,
		`{"annotations":{"` + own + `":"{}"},"Annotations":{"app":"x"}}`:                              false, // another letter case
		`{"annotations":{"` + own + `":"{}","` + own + `":"{}"}}`:                                     false, // twice
		`{"labels":{"a":"b"}}`:  false,
		`{"annotations":["x"]}`: false,
		`null`:                  false,
	} {
		if _, got := ownAnnotation(json.RawMessage(body), "k1"); got != want {
			t.Errorf("ownAnnotation(%s) = %v, want %v", body, got, want)
		}
	}
	if _, ok := ownAnnotation(nil, "k1"); ok {
		t.Error("no metadata")
	}
}

func TestFinalizerRemoval(t *testing.T) {
	fin := workload.FinalizerPrefix + "k1"
	want := `[{"op":"test","path":"/metadata/finalizers/1","value":"` + fin + `"},{"op":"remove","path":"/metadata/finalizers/1"}]`
	for body, ok := range map[string]bool{
		want: true,
		`[{"path":"/metadata/finalizers/1","value":"` + fin + `","op":"test"},{"path":"/metadata/finalizers/1","op":"remove"}]`: true,
		// The attack of issue 49: an operation whose keys come again in
		// another letter case (Go's struct decoding is case-insensitive,
		// the API server's is not).
		`[{"op":"test","path":"/metadata/finalizers/1","value":"` + fin + `"},{"op":"add","path":"/data/x","value":"y","OP":"remove","PATH":"/metadata/finalizers/1"}]`: false,
		`[{"op":"add","path":"/data/x","value":"` + fin + `","Op":"test","Path":"/metadata/finalizers/1"},{"op":"remove","path":"/metadata/finalizers/1"}]`:             false,
		`[{"OP":"test","PATH":"/metadata/finalizers/1","VALUE":"` + fin + `"},{"OP":"remove","PATH":"/metadata/finalizers/1"}]`:                                         false,
		// A key twice, unknown keys, extra operations.
		`[{"op":"test","path":"/metadata/finalizers/1","value":"` + fin + `"},{"op":"remove","path":"/metadata/finalizers/1","op":"remove"}]`:                  false,
		`[{"op":"test","path":"/metadata/finalizers/1","value":"` + fin + `"},{"op":"remove","path":"/metadata/finalizers/1","from":"/spec"}]`:                 false,
		`[{"op":"test","path":"/metadata/finalizers/1","value":"` + fin + `"},{"op":"remove","path":"/metadata/finalizers/1","value":"x"}]`:                    false,
		`[{"op":"test","path":"/metadata/finalizers/1","value":"` + fin + `"},{"op":"remove","path":"/metadata/finalizers/1"},{"op":"remove","path":"/spec"}]`: false,
		// Another finalizer, another path, a value that is not a string.
		`[{"op":"test","path":"/metadata/finalizers/1","value":"other"},{"op":"remove","path":"/metadata/finalizers/1"}]`:                false,
		`[{"op":"test","path":"/metadata/finalizers/1","value":"` + fin + `"},{"op":"remove","path":"/metadata/finalizers/2"}]`:          false,
		`[{"op":"test","path":"/metadata/finalizers/01","value":"` + fin + `"},{"op":"remove","path":"/metadata/finalizers/01"}]`:        false,
		`[{"op":"test","path":"/metadata/finalizers/-","value":"` + fin + `"},{"op":"remove","path":"/metadata/finalizers/-"}]`:          false,
		`[{"op":"test","path":"/metadata/finalizers/1/x","value":"` + fin + `"},{"op":"remove","path":"/metadata/finalizers/1/x"}]`:      false,
		`[{"op":"test","path":"/metadata/finalizers","value":["` + fin + `"]},{"op":"remove","path":"/metadata/finalizers"}]`:            false,
		`[{"op":"test","path":"/metadata/finalizers/1"},{"op":"remove","path":"/metadata/finalizers/1"}]`:                                false,
		`[{"op":"test","path":"/metadata/finalizers/1","value":"` + fin + `"},{"op":"remove","path":"/metadata/finalizers/1"}] trailing`: false,
		`{}`: false,
	} {
		out, err := finalizerRemoval([]byte(body), fin)
		if (err == nil) != ok {
			t.Errorf("finalizerRemoval(%s): err %v, want ok=%v", body, err, ok)
		}
		if err == nil && string(out) != want {
			t.Errorf("finalizerRemoval(%s) forwards %s, want %s", body, out, want)
		}
	}
}

func TestStatusPatch(t *testing.T) {
	own := workload.StatusAnnotationPrefix + "k1"
	for body, want := range map[string]string{
		`{"status":{"replicas":1}}`:                        `{"status":{"replicas":1}}`,
		` { "status" : { "replicas" : 1 } } `:              `{"status":{"replicas":1}}`,
		`{"metadata":{"annotations":{"` + own + `":"x"}}}`: `{"metadata":{"annotations":{"` + own + `":"x"}}}`,
		`{"status":{},"Metadata":{"labels":{"a":"b"}}}`:    "",
		`{"status":{},"status":{}}`:                        "",
		`{"Status":{}}`:                                    "",
		`{"status":{},"metadata":{}}`:                      "",
		`{"metadata":{"labels":{"a":"b"}}}`:                "",
		`[]`:                                               "",
	} {
		out, err := statusPatch([]byte(body), "k1")
		if want == "" {
			if err == nil {
				t.Errorf("statusPatch(%s) = %s, want a refusal", body, out)
			}
			continue
		}
		if err != nil || string(out) != want {
			t.Errorf("statusPatch(%s) = %s, %v; want %s", body, out, err, want)
		}
	}
}
