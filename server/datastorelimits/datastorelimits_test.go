package datastorelimits

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestMapped(t *testing.T) {
	s := store{resource: schema.GroupResource{Group: "example.com", Resource: "blobs"}}
	exhausted := status.Error(codes.ResourceExhausted, "trying to send message larger than max (2560378 vs. 2097152)")
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{exhausted, true},
		{fmt.Errorf("creating: %w", exhausted), true},
		{errors.New("rpc error: code = ResourceExhausted desc = trying to send message larger than max"), true},
		{status.Error(codes.Unavailable, "no connection"), false},
		{apierrors.NewConflict(s.resource, "x", errors.New("changed")), false},
	} {
		got := apierrors.IsRequestEntityTooLargeError(s.mapped(tc.err))
		if got != tc.want {
			t.Errorf("mapped(%v) is 413: %v, want %v", tc.err, got, tc.want)
		}
	}
	if s.mapped(nil) != nil {
		t.Error("mapped(nil) is not nil")
	}
}
