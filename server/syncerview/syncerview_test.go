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
		`{"labels":{"a":"b"}}`:                                                                        false,
		`{"annotations":["x"]}`:                                                                       false,
		`null`:                                                                                        false,
	} {
		if got := ownAnnotation(json.RawMessage(body), "k1"); got != want {
			t.Errorf("ownAnnotation(%s) = %v, want %v", body, got, want)
		}
	}
	if ownAnnotation(nil, "k1") {
		t.Error("no metadata")
	}
}
