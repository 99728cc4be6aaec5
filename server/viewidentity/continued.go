package viewidentity

import (
	"context"

	"k8s.io/apiserver/pkg/authentication/user"
)

// Continued reports whether the request of ctx is one a view continued as
// an identity of its own (not the caller's): checks that must be made for
// the real requester cannot be made with that identity.
func Continued(ctx context.Context) bool {
	_, ok := ctx.Value(key{}).(user.Info)
	return ok
}
