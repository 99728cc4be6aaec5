package frontproxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestBufferBodyBounded: a body is read whole and its bytes are held until
// the request is done; bodies over the per-request bound, or beyond the
// bound of all held at once, pass through unread and whole.
func TestBufferBodyBounded(t *testing.T) {
	var held atomic.Int64
	small := strings.Repeat("a", 1000)
	req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(small))
	release, err := bufferBody(req, &held)
	if err != nil {
		t.Fatal(err)
	}
	if held.Load() != 1000 {
		t.Errorf("held %d bytes, want 1000", held.Load())
	}
	if b, _ := io.ReadAll(req.Body); string(b) != small || req.ContentLength != 1000 || req.GetBody == nil {
		t.Errorf("buffered body: %d bytes, length %d", len(b), req.ContentLength)
	}
	release()
	if held.Load() != 0 {
		t.Errorf("held %d bytes after release", held.Load())
	}

	// Unknown length, larger than the bound: streamed, nothing held, nothing lost.
	big := bytes.Repeat([]byte("b"), maxBuffered+10)
	req = httptest.NewRequest(http.MethodPost, "/x", io.NopCloser(bytes.NewReader(big)))
	req.ContentLength = -1
	release, err = bufferBody(req, &held)
	if err != nil {
		t.Fatal(err)
	}
	if held.Load() != 0 {
		t.Errorf("a body over the bound holds %d bytes", held.Load())
	}
	if b, _ := io.ReadAll(req.Body); !bytes.Equal(b, big) {
		t.Errorf("a streamed body lost bytes: %d of %d", len(b), len(big))
	}
	release()

	// Beyond the total: passed on unread.
	held.Store(maxBufferedTotal - 10)
	req = httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(small))
	release, err = bufferBody(req, &held)
	if err != nil {
		t.Fatal(err)
	}
	if held.Load() != maxBufferedTotal-10 {
		t.Errorf("over the total: held %d", held.Load())
	}
	if b, _ := io.ReadAll(req.Body); string(b) != small {
		t.Errorf("an unbuffered body lost bytes: %d", len(b))
	}
	release()
}
