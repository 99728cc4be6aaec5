package embeddedkine

import (
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"
)

// kine logs through logrus, and some of its messages carry whole requests:
// on a failed write, KVServerBridge.Put and Txn log the etcd request with
// %s, which prints the object being written (a Secret's data included),
// once per failed write, with no limit (57 MB of log in 40 s on a full
// disk). kine is a dependency, not ours to change, so its log is taken over
// here: logrus writes nothing itself, and a hook hands each message to klog
// (kcp's own log, format and stream) with every value field of a printed
// request withheld, at most maxMessage bytes of it, and at most one message
// of a kind (its leading words) per kineLogEvery: the rest are counted and
// the count goes with the next message of that kind. What failed (key,
// error) is logged by kcp's own layers anyway (Health.failed,
// clusterstore's datastore errors), also rate limited.

const (
	kineLogEvery = 5 * time.Second
	maxMessage   = 2048
)

// quotedValue is a value field of a printed etcd request (PutRequest.value,
// Compare.value) in protobuf's text format: a double-quoted string with
// backslash escapes, with or without a space after the colon.
var quotedValue = regexp.MustCompile(`\bvalue:\s*"(?:[^"\\]|\\.)*"`)

// unterminatedValue is a value field cut off by the length limit (or
// printed without its closing quote): withheld up to the end.
var unterminatedValue = regexp.MustCompile(`(?s)\bvalue:\s*".*$`)

// redactKineMessage withholds the values of a kine message: what remains
// is keys, revisions, counts and error texts.
func redactKineMessage(msg string) string {
	msg = quotedValue.ReplaceAllLiteralString(msg, "value:<withheld>")
	msg = unterminatedValue.ReplaceAllString(msg, "value:<withheld>")
	if len(msg) > maxMessage {
		msg = msg[:maxMessage] + "...(truncated)"
	}
	return msg
}

// kineLogKind is what makes two kine messages "the same" for the rate
// limit: the words it starts with, before the first key, number or
// punctuation ("error in txn", "Failed to list latest changes").
func kineLogKind(msg string) string {
	end := strings.IndexFunc(msg, func(r rune) bool {
		return !(r == ' ' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	})
	if end < 0 {
		end = len(msg)
	}
	kind := strings.TrimSpace(msg[:end])
	if len(kind) > 60 {
		kind = kind[:60]
	}
	return kind
}

// kineLogHook hands kine's logrus messages to klog, rate limited by kind.
type kineLogHook struct {
	mu    sync.Mutex
	now   func() time.Time
	log   func(level logrus.Level, msg string, keysAndValues ...any)
	kinds map[string]*kineLogState
}

type kineLogState struct {
	last       time.Time
	suppressed int
}

func newKineLogHook() *kineLogHook {
	return &kineLogHook{now: time.Now, log: toKlog, kinds: map[string]*kineLogState{}}
}

func (h *kineLogHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h *kineLogHook) Fire(e *logrus.Entry) error {
	// Fatal and panic messages are never held back: the process is about
	// to stop, and they say why.
	urgent := e.Level <= logrus.FatalLevel
	kind := kineLogKind(e.Message)
	h.mu.Lock()
	st := h.kinds[kind]
	if st == nil {
		if len(h.kinds) > 1000 {
			// Kinds are kine's message texts: a handful. Never grow
			// without bound if that changes.
			clear(h.kinds)
		}
		st = &kineLogState{}
		h.kinds[kind] = st
	}
	now := h.now()
	if !urgent && !st.last.IsZero() && now.Sub(st.last) < kineLogEvery {
		st.suppressed++
		h.mu.Unlock()
		return nil
	}
	suppressed := st.suppressed
	st.last, st.suppressed = now, 0
	h.mu.Unlock()

	kv := []any{}
	if suppressed > 0 {
		kv = append(kv, "suppressedSince", fmt.Sprintf("%d more like it in the last %s", suppressed, kineLogEvery))
	}
	keys := make([]string, 0, len(e.Data))
	for k := range e.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := redactKineMessage(fmt.Sprint(e.Data[k]))
		if strings.EqualFold(k, "value") {
			v = "<withheld>"
		}
		kv = append(kv, k, v)
	}
	h.log(e.Level, "kine: "+redactKineMessage(e.Message), kv...)
	return nil
}

func toKlog(level logrus.Level, msg string, kv ...any) {
	switch {
	case level <= logrus.ErrorLevel:
		klog.ErrorS(nil, msg, kv...)
	case level == logrus.WarnLevel:
		if len(kv) > 0 {
			msg += fmt.Sprintf(" %v", kv)
		}
		klog.Warning(msg)
	default:
		klog.V(2).InfoS(msg, kv...)
	}
}

// takeOverKineLog sends logrus (kine's log) through the hook, and nothing
// to logrus's own output.
func takeOverKineLog() {
	l := logrus.StandardLogger()
	l.SetOutput(io.Discard)
	l.ReplaceHooks(logrus.LevelHooks{})
	l.AddHook(newKineLogHook())
}
