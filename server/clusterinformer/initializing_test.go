package clusterinformer

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestReadsWaitForFillingCaches: a server's own clients read a resource
// whose watch cache is filling as soon as it is filled, not after the
// growing Retry-After the API server asks of others; other 429s, and
// writes, are answered as they were.
func TestReadsWaitForFillingCaches(t *testing.T) {
	var refusals, posts atomic.Int32
	initializing := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"storage is (re)initializing","reason":"TooManyRequests","details":{"retryAfterSeconds":30},"code":429}`
	throttled := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too many requests","reason":"TooManyRequests","details":{"retryAfterSeconds":1},"code":429}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost:
			posts.Add(1)
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(initializing))
		case strings.HasSuffix(r.URL.Path, "/configmaps") && refusals.Add(1) <= 5:
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(initializing))
		case strings.HasSuffix(r.URL.Path, "/secrets"):
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(throttled))
		default:
			w.Write([]byte(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}`))
		}
	}))
	defer srv.Close()
	cs, err := kubernetes.NewForConfig(WildcardConfig(&rest.Config{Host: srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	start := time.Now()
	l, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil || l.ResourceVersion != "7" {
		t.Fatalf("list while the cache fills: %v, %v", l, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the list waited %s: it followed the 30 s Retry-After", took)
	}
	if n := refusals.Load(); n != 6 {
		t.Errorf("%d list requests, want the 5 refused and 1 answered", n)
	}

	// Another 429 is the client's to handle (client-go retries it after
	// its Retry-After): the Status reaches it intact.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = cs.CoreV1().Secrets("").List(short, metav1.ListOptions{})
	if err == nil || (!apierrors.IsTooManyRequests(err) && !errors.Is(err, context.DeadlineExceeded)) {
		t.Errorf("a throttled list: %v, want 429 or the client's own deadline", err)
	}
	noRetry, err := kubernetes.NewForConfig(WildcardConfig(&rest.Config{Host: srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	err = noRetry.CoreV1().RESTClient().Get().Resource("secrets").MaxRetries(0).Do(ctx).Error()
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "too many requests") {
		t.Errorf("a throttled list without retries: %v, want the server's 429 Status", err)
	}

	// A write is never repeated by the transport.
	err = noRetry.CoreV1().RESTClient().Post().Namespace("a").Resource("configmaps").Body(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}).MaxRetries(0).Do(ctx).Error()
	if !apierrors.IsTooManyRequests(err) || posts.Load() != 1 {
		t.Errorf("a create refused while the cache fills: %v after %d requests, want the 429 after one", err, posts.Load())
	}

	// A read ends with its context.
	refusals.Store(-1000)
	short2, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	if _, err := cs.CoreV1().ConfigMaps("").List(short2, metav1.ListOptions{}); err == nil {
		t.Errorf("a list whose context ended while the cache filled answered")
	}
}
