package frontproxy

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcpsql/kcp/server/routing"
)

// Reads across all logical clusters (/clusters/*) through the proxy fan
// out to every shard: a list is every shard's list in one (items, or a
// Table's rows), a watch is every shard's watch in one stream. Each
// shard's resourceVersion goes into one composite resourceVersion
// ("shards." and a base64url JSON object, opaque to clients) that the
// merged list and every bookmark carry; a list or watch from a composite
// resumes each shard where it was. Objects keep their shard's own
// resourceVersion (an update of one goes to its shard). A watch from a
// resourceVersion that is not a composite (an object's) is answered 410
// Gone, and the client lists again. Only JSON is spoken to the shards; a
// shard that fails fails the whole read (a part would be a lie).

const compositePrefix = "shards."

var infoFactory = &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

func encodeRV(rvs map[string]string) string {
	b, _ := json.Marshal(rvs)
	return compositePrefix + base64.RawURLEncoding.EncodeToString(b)
}

func decodeRV(s string) (map[string]string, bool) {
	raw, ok := strings.CutPrefix(s, compositePrefix)
	if !ok {
		return nil, false
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil {
		return nil, false
	}
	var m map[string]string
	if json.Unmarshal(b, &m) != nil {
		return nil, false
	}
	return m, true
}

// wildcardKind says whether a /clusters/* request is a list or a watch of
// resources (fanned out) or something else (discovery: the root shard's).
func wildcardKind(req *http.Request, rest string) string {
	if req.Method != http.MethodGet {
		return ""
	}
	r := req.Clone(req.Context())
	r.URL.Path = rest
	info, err := infoFactory.NewRequestInfo(r)
	if err != nil || !info.IsResourceRequest {
		return ""
	}
	if info.Verb == "list" || info.Verb == "watch" {
		return info.Verb
	}
	return ""
}

// shardRequest is the request to one shard for a fanned-out read.
func (p *Proxy) shardRequest(ctx context.Context, in *http.Request, shard, rv string, t http.RoundTripper) (*http.Response, error) {
	target := p.targets[shard]
	u := *in.URL
	u.Scheme, u.Host = target.Scheme, target.Host
	q := u.Query()
	// Every shard's whole list: a page of several shards has no one
	// continue token.
	q.Del("limit")
	q.Del("continue")
	q.Del("resourceVersionMatch")
	if rv == "" {
		q.Del("resourceVersion")
	} else {
		q.Set("resourceVersion", rv)
	}
	u.RawQuery = q.Encode()
	out, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for k, v := range in.Header {
		out.Header[k] = v
	}
	out.Header.Set("Accept", jsonOnly(in.Header.Get("Accept")))
	out.Header.Del("Accept-Encoding")
	return t.RoundTrip(out)
}

// jsonOnly keeps the JSON media types of an Accept header (a Table or
// PartialObjectMetadata is asked for with parameters on them).
func jsonOnly(accept string) string {
	var keep []string
	for _, part := range strings.Split(accept, ",") {
		if strings.HasPrefix(strings.TrimSpace(part), "application/json") {
			keep = append(keep, strings.TrimSpace(part))
		}
	}
	if len(keep) == 0 {
		return "application/json"
	}
	return strings.Join(keep, ",")
}

// rvsFor splits the client's resourceVersion into each shard's.
func (p *Proxy) rvsFor(w http.ResponseWriter, rv string, watch bool) (map[string]string, bool) {
	out := map[string]string{}
	if m, ok := decodeRV(rv); ok {
		for _, s := range p.cfg.Shards {
			out[s.Name] = m[s.Name]
		}
		return out, true
	}
	if rv != "" && rv != "0" {
		code, reason := http.StatusBadRequest, metav1.StatusReasonBadRequest
		if watch {
			code, reason = http.StatusGone, metav1.StatusReasonExpired
		}
		routing.WriteStatus(w, code, reason, fmt.Sprintf("resourceVersion %q is not one of the front proxy's composite resource versions across shards; list again", rv))
		return nil, false
	}
	for _, s := range p.cfg.Shards {
		out[s.Name] = rv
	}
	return out, true
}

func (p *Proxy) serveWildcardList(w http.ResponseWriter, req *http.Request, t http.RoundTripper) {
	rvs, ok := p.rvsFor(w, req.URL.Query().Get("resourceVersion"), false)
	if !ok {
		return
	}
	type answer struct {
		shard string
		body  []byte
		code  int
		err   error
	}
	answers := make([]answer, len(p.cfg.Shards))
	var wg sync.WaitGroup
	for i, s := range p.cfg.Shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := answer{shard: s.Name}
			resp, err := p.shardRequest(req.Context(), req, s.Name, rvs[s.Name], t)
			if err != nil {
				a.err = err
			} else {
				a.code = resp.StatusCode
				a.body, a.err = io.ReadAll(io.LimitReader(resp.Body, 1<<30))
				resp.Body.Close()
			}
			answers[i] = a
		}()
	}
	wg.Wait()
	var merged map[string]interface{}
	rowsKey := "items"
	for _, a := range answers {
		if a.err != nil {
			w.Header().Set("Retry-After", "5")
			routing.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
				fmt.Sprintf("shard %s cannot be reached, so a read across all workspaces would be incomplete; try again shortly", a.shard))
			return
		}
		if a.code != http.StatusOK {
			// The shard's own refusal (403, 410, ...), as it gave it.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(a.code)
			_, _ = w.Write(a.body)
			return
		}
		var doc map[string]interface{}
		if err := json.Unmarshal(a.body, &doc); err != nil {
			routing.WriteStatus(w, http.StatusBadGateway, metav1.StatusReasonInternalError, fmt.Sprintf("shard %s answered a list that is not JSON: %v", a.shard, err))
			return
		}
		meta, _ := doc["metadata"].(map[string]interface{})
		if meta != nil {
			rv, _ := meta["resourceVersion"].(string)
			rvs[a.shard] = rv
		}
		if doc["kind"] == "Table" {
			rowsKey = "rows"
		}
		if merged == nil {
			merged = doc
			continue
		}
		more, _ := doc[rowsKey].([]interface{})
		have, _ := merged[rowsKey].([]interface{})
		merged[rowsKey] = append(have, more...)
	}
	meta, _ := merged["metadata"].(map[string]interface{})
	if meta == nil {
		meta = map[string]interface{}{}
		merged["metadata"] = meta
	}
	meta["resourceVersion"] = encodeRV(rvs)
	delete(meta, "continue")
	delete(meta, "remainingItemCount")
	if merged[rowsKey] == nil {
		merged[rowsKey] = []interface{}{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(merged)
}

// watchEvent is one event of a watch stream, the object left raw but for
// its resourceVersion.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

func (p *Proxy) serveWildcardWatch(w http.ResponseWriter, req *http.Request, t http.RoundTripper) {
	rvs, ok := p.rvsFor(w, req.URL.Query().Get("resourceVersion"), true)
	if !ok {
		return
	}
	bookmarks := req.URL.Query().Get("allowWatchBookmarks") == "true"
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	type shardEvent struct {
		shard string
		ev    watchEvent
		err   error
	}
	events := make(chan shardEvent)
	var resps []*http.Response
	for _, s := range p.cfg.Shards {
		resp, err := p.shardRequest(ctx, req, s.Name, rvs[s.Name], t)
		if err != nil {
			w.Header().Set("Retry-After", "5")
			routing.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
				fmt.Sprintf("shard %s cannot be reached, so a watch across all workspaces would miss its changes; try again shortly", s.Name))
			return
		}
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(resp.StatusCode)
			_, _ = w.Write(body)
			return
		}
		resps = append(resps, resp)
		go func(shard string, body io.ReadCloser) {
			defer body.Close()
			dec := json.NewDecoder(bufio.NewReader(body))
			for {
				var ev watchEvent
				err := dec.Decode(&ev)
				select {
				case events <- shardEvent{shard: shard, ev: ev, err: err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}(s.Name, resp.Body)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		// The client's watch starts when it has the headers.
		flusher.Flush()
	}
	enc := json.NewEncoder(w)
	for {
		select {
		case <-ctx.Done():
			return
		case se := <-events:
			if se.err != nil {
				// One shard's watch ended: so does this one, and the
				// client watches again from the last composite.
				return
			}
			if se.ev.Type == "ERROR" {
				_ = enc.Encode(se.ev)
				return
			}
			var meta struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			}
			if json.Unmarshal(se.ev.Object, &meta) == nil && meta.Metadata.ResourceVersion != "" {
				rvs[se.shard] = meta.Metadata.ResourceVersion
			}
			if se.ev.Type == "BOOKMARK" {
				if !bookmarks {
					continue
				}
				se.ev.Object = bookmarkObject(se.ev.Object, encodeRV(rvs))
				_ = enc.Encode(se.ev)
			} else {
				_ = enc.Encode(se.ev)
				if bookmarks {
					// Where to resume after this event, across shards.
					_ = enc.Encode(watchEvent{Type: "BOOKMARK", Object: bookmarkObject(se.ev.Object, encodeRV(rvs))})
				}
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
	}
}

// bookmarkObject is a bookmark of the kind of obj carrying rv.
func bookmarkObject(obj json.RawMessage, rv string) json.RawMessage {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	_ = json.Unmarshal(obj, &head)
	b, _ := json.Marshal(map[string]interface{}{"apiVersion": head.APIVersion, "kind": head.Kind, "metadata": map[string]interface{}{"resourceVersion": rv}})
	return b
}
