package clienttest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// openaiAPI is an api with the Agents API's POST
// /v1/agents/sessions/{id}/events, whose Idempotency-Key openai-go sends
// from BetaAgentSessionEventNewParams.IdempotencyKey: it answers 202 with
// a body unique per run.
func openaiAPI(t *testing.T) *api {
	return newAPI(t, func(a *api) {
		a.handle("POST /v1/agents/sessions/{id}/events", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, `{"session":%q,"accepted":%d}`, r.PathValue("id"), a.runs.Load())
		})
	})
}

// openaiClient is openai-go's own client pointed at a, retrying
// retries times.
func openaiClient(a *api, retries int) openai.Client {
	return openai.NewClient(
		option.WithBaseURL(a.srv.URL+"/v1/"),
		option.WithAPIKey("sk-alice"),
		option.WithHTTPClient(a.srv.Client()),
		option.WithMaxRetries(retries),
	)
}

// sendMessage submits one user message to session sess_1 with key (none
// when ""), and returns the HTTP response openai-go got.
func sendMessage(t *testing.T, c openai.Client, key string) *http.Response {
	t.Helper()
	resp, err := send(c, key)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// send is sendMessage for a goroutine: it returns the error.
func send(c openai.Client, key string) (*http.Response, error) {
	params := openai.BetaAgentSessionEventNewParams{Events: []openai.AgentSessionInputParamUnion{{
		OfParamAgentSessionInputMessage: &openai.AgentSessionInputParamAgentSessionInputMessage{
			Input: []openai.AgentSessionInputMessageParam{{Content: []openai.InputContentParamUnion{{
				OfParamInputText: &openai.InputContentParamInputText{Text: "charge order 1"},
			}}}},
		},
	}}}
	if key != "" {
		params.IdempotencyKey = openai.String(key)
	}
	var resp *http.Response
	err := c.Beta.Agents.Sessions.Events.New(context.Background(), "sess_1", params, option.WithResponseInto(&resp))
	return resp, err
}

func TestOpenAIGoClientGetsTheReplay(t *testing.T) {
	const key = "stainless-go-retry-0b8a6f1e-3c2d-4e5f-9a7b-1c2d3e4f5a6b"
	t.Run("the same key twice: 202, then the first answer replayed, one run", func(t *testing.T) {
		a := openaiAPI(t)
		c := openaiClient(a, 0)
		first := sendMessage(t, c, key)
		if got := a.last(); len(got.key) != 1 || got.key[0] != key || first.StatusCode != http.StatusAccepted || got.replayed != "" {
			t.Fatalf("first: %d, as received %+v; want the bare key once and 202", first.StatusCode, got)
		}
		second := sendMessage(t, c, key)
		if second.StatusCode != http.StatusAccepted || second.Header.Get("Idempotent-Replayed") != "true" || a.last().replayed != "true" {
			t.Fatalf("second: %d replayed %q (server side %q)", second.StatusCode, second.Header.Get("Idempotent-Replayed"), a.last().replayed)
		}
		if a.runs.Load() != 1 {
			t.Fatalf("handler ran %d times", a.runs.Load())
		}
	})
	t.Run("openai-go's retry of a lost response keeps the key and is replayed", func(t *testing.T) {
		a := openaiAPI(t)
		a.dropNext.Store(true)
		resp := sendMessage(t, openaiClient(a, 2), key)
		reqs := a.requests()
		if len(reqs) != 2 || len(reqs[1].key) != 1 || reqs[1].key[0] != key || string(reqs[0].body) != string(reqs[1].body) {
			t.Fatalf("requests %+v, want the same request twice", reqs)
		}
		if reqs[0].status != http.StatusAccepted || resp.StatusCode != http.StatusAccepted || resp.Header.Get("Idempotent-Replayed") != "true" || a.runs.Load() != 1 {
			t.Fatalf("first %d; retry %d replayed %q; runs %d", reqs[0].status, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), a.runs.Load())
		}
	})
	t.Run("openai-go (bare) and a quoted raw request are one key, both ways", func(t *testing.T) {
		for _, sdkFirst := range []bool{true, false} {
			a := openaiAPI(t)
			c := openaiClient(a, 0)
			probe := openaiAPI(t)
			sendMessage(t, openaiClient(probe, 0), "probe")
			form := probe.last()
			if sdkFirst {
				sendMessage(t, c, key)
				resp, _ := a.raw(http.MethodPost, "/v1/agents/sessions/sess_1/events", "sk-alice", `"`+key+`"`, form.contentType, form.body)
				if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Idempotent-Replayed") != "true" {
					t.Fatalf("SDK first, quoted retry: %d replayed %q", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
				}
			} else {
				resp, _ := a.raw(http.MethodPost, "/v1/agents/sessions/sess_1/events", "sk-alice", `"`+key+`"`, form.contentType, form.body)
				if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Idempotent-Replayed") != "" {
					t.Fatalf("quoted first: %d replayed %q", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
				}
				if r := sendMessage(t, c, key); r.Header.Get("Idempotent-Replayed") != "true" {
					t.Fatalf("SDK retry after a quoted first: replayed %q", r.Header.Get("Idempotent-Replayed"))
				}
			}
			if a.runs.Load() != 1 {
				t.Fatalf("sdk first %v: handler ran %d times", sdkFirst, a.runs.Load())
			}
		}
	})
}

// TestOpenAIGoRetriesABusyKeyAfterTheEstimatedRetryAfter: openai-go
// retries a 409 after its Retry-After. A route whose recorded run took
// 1.1 s answers a second request under a running key with a Retry-After
// of about 2 s (not the lease's 60), and openai-go's retry then gets the
// first answer replayed; the handler runs once for the key.
func TestOpenAIGoRetriesABusyKeyAfterTheEstimatedRetryAfter(t *testing.T) {
	const run = 1100 * time.Millisecond
	entered := make(chan struct{}, 2)
	a := newAPI(t, func(a *api) {
		a.handle("POST /v1/agents/sessions/{id}/events", func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			time.Sleep(run)
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, `{"accepted":%d}`, a.runs.Load())
		})
	})
	sendMessage(t, openaiClient(a, 0), "seed") // one recorded run of the route
	<-entered
	const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := send(openaiClient(a, 0), key); err != nil {
			t.Error(err)
		}
	}()
	<-entered
	resp := sendMessage(t, openaiClient(a, 1), key)
	wg.Wait()
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("openai-go's answer: %d replayed %q", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
	}
	var busy []seen
	for _, r := range a.requests() {
		if r.status == http.StatusConflict {
			busy = append(busy, r)
		}
	}
	if len(busy) != 1 || (busy[0].retryAfter != "1" && busy[0].retryAfter != "2") {
		t.Fatalf("409s %+v, want one with Retry-After 1 or 2", busy)
	}
	if a.runs.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2 (the seed and the key)", a.runs.Load())
	}
}
