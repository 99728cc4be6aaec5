package clusterstore

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/kcpsql/kcp/storage/embeddedkine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// retryAfterSeconds is what clients are told to wait after a datastore error.
const retryAfterSeconds = 2

// datastoreError turns an error of the datastore (kine's gRPC status: the
// database unreachable, a write not stored, a session killed) into what a
// client should see: 503 Service Unavailable with Retry-After and a generic
// message, because the driver's text (addresses, user and database names) is
// the operator's business, not every tenant's. The detail is logged. An
// object larger than the datastore takes is 413. Errors the API machinery
// understands (not found, conflicts, validation) pass through unchanged.
func datastoreError(err error) error {
	if err == nil {
		return nil
	}
	var apiStatus apierrors.APIStatus
	if errors.As(err, &apiStatus) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.OK, codes.Canceled, codes.DeadlineExceeded:
		return err
	case codes.ResourceExhausted:
		return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the object is too large for the datastore, which takes objects of up to %d MiB of JSON; store less in one object", embeddedkine.MaxRequestBytes>>20))
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition:
		// etcd's own answers (compacted, future revision, bad request)
		// that the storage layer maps itself.
		return err
	}
	logDatastoreError(err)
	e := apierrors.NewServiceUnavailable("the datastore could not complete the request; retry later")
	e.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: retryAfterSeconds}
	return e
}

var datastoreLog struct {
	sync.Mutex
	last time.Time
}

// logDatastoreError logs the detail at most once a second: an outage fails
// every request at once.
func logDatastoreError(err error) {
	datastoreLog.Lock()
	defer datastoreLog.Unlock()
	if time.Since(datastoreLog.last) < time.Second {
		return
	}
	datastoreLog.last = time.Now()
	klog.ErrorS(err, "datastore error: requests answer 503 Service Unavailable")
}

// checkResourceVersion answers a resourceVersion that is not a number with
// 400 Bad Request (upstream's storage reports it as an internal error).
func checkResourceVersion(rv string) error {
	if rv == "" {
		return nil
	}
	if _, err := strconv.ParseUint(rv, 10, 64); err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q: must be a non-negative integer taken from an earlier response", rv))
	}
	return nil
}
