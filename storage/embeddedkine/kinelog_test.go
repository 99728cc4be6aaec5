package embeddedkine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// A failed write's request, as kine's bridge logs it, keeps its key and
// error and loses its value, quotes and escapes included.
func TestRedactKineMessage(t *testing.T) {
	secret := `{"kind":"Secret","data":{"password":"czNjcjN0LXZhbHVl"},"note":"a \"quoted\" part: {x}"}`
	put := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("/registry/core/secrets/root/default/s"), Value: []byte(secret)}}}
	txn := &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("/registry/core/secrets/root/default/s"), Target: pb.Compare_VALUE, TargetUnion: &pb.Compare_Value{Value: []byte(secret)}}},
		Success: []*pb.RequestOp{put},
	}
	for _, msg := range []string{
		fmt.Sprintf("error in txn %s: %v", txn, "kcp: the datastore did not store the write"),
		fmt.Sprintf("error in put %s: %v", put.GetRequestPut(), "disk full"),
	} {
		got := redactKineMessage(msg)
		for _, leak := range []string{"czNjcjN0LXZhbHVl", "quoted", "password"} {
			if strings.Contains(got, leak) {
				t.Errorf("%q still holds %q: %s", msg, leak, got)
			}
		}
		if !strings.Contains(got, "/registry/core/secrets/root/default/s") || !strings.Contains(got, "withheld") {
			t.Errorf("key or marker missing: %s", got)
		}
	}
	if got := redactKineMessage(`error in put key:"k" value:"cut off here`); strings.Contains(got, "cut off") {
		t.Errorf("an unterminated value was kept: %s", got)
	}
}

// One message of a kind per kineLogEvery; the next says how many were held back.
func TestKineLogHookRateLimit(t *testing.T) {
	now := time.Unix(0, 0)
	var logged []string
	h := &kineLogHook{now: func() time.Time { return now }, kinds: map[string]*kineLogState{},
		log: func(_ logrus.Level, msg string, kv ...any) { logged = append(logged, fmt.Sprint(msg, kv)) }}
	fire := func(msg string) {
		if err := h.Fire(&logrus.Entry{Level: logrus.ErrorLevel, Message: msg}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1000 {
		fire(fmt.Sprintf("error in txn key:\"/k/%d\" value:\"v\": failed", i))
		fire(fmt.Sprintf("Failed to list latest changes: %d", i))
	}
	if len(logged) != 2 {
		t.Fatalf("want one message per kind, got %d: %v", len(logged), logged)
	}
	now = now.Add(kineLogEvery)
	fire(`error in txn key:"/k/x" value:"v": failed`)
	if len(logged) != 3 || !strings.Contains(logged[2], "999 more") {
		t.Errorf("the count of held-back messages is missing: %v", logged)
	}
	if err := h.Fire(&logrus.Entry{Level: logrus.FatalLevel, Message: "error in txn again"}); err != nil || len(logged) != 4 {
		t.Errorf("a fatal message was held back: %v", logged)
	}
}
