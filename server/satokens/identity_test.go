package satokens

import (
	"context"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcpsql/kcp/storage/logicalcluster"
)

// TestOnlyALookedUpServiceAccountIsMarked: the mark depends on the token
// validator having found the account, not on the name.
func TestOnlyALookedUpServiceAccountIsMarked(t *testing.T) {
	bot := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bot", UID: types.UID("u-1")}}
	cases := []struct {
		name     string
		lookedUp *corev1.ServiceAccount
		user     user.Info
		marked   bool
	}{
		{"service-account token", bot, &user.DefaultInfo{Name: "system:serviceaccount:default:bot", UID: "u-1"}, true},
		{"token-file user of the same name", nil, &user.DefaultInfo{Name: "system:serviceaccount:default:bot", UID: "u-1"}, false},
		{"another account than the one looked up", bot, &user.DefaultInfo{Name: "system:serviceaccount:default:other", UID: "u-1"}, false},
		{"same name, another UID", bot, &user.DefaultInfo{Name: "system:serviceaccount:default:bot", UID: "u-2"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			delegate := authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
				if c.lookedUp != nil {
					record(req.Context(), clusterOf(req.Context()), c.lookedUp)
				}
				return &authenticator.Response{User: c.user}, true, nil
			})
			req, _ := http.NewRequest("GET", "/", nil)
			req = req.WithContext(logicalcluster.WithCluster(context.Background(), "root:org-a"))
			resp, ok, err := WithServiceAccountIdentity(delegate).AuthenticateRequest(req)
			if !ok || err != nil {
				t.Fatal(ok, err)
			}
			sa, marked := resp.User.(ServiceAccountUser)
			if marked != c.marked {
				t.Fatalf("marked = %v, want %v", marked, c.marked)
			}
			if marked && sa.ServiceAccountCluster() != "root:org-a" {
				t.Errorf("cluster = %s", sa.ServiceAccountCluster())
			}
		})
	}
}
