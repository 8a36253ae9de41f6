package mcptoken_test

import (
	"crypto/subtle"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/mcptoken"
	"github.com/ctoken/ctoken/replay"
)

// An operator's endpoint for Tasks.AllowRerun, behind a bearer token: a
// stuck key's caller, tool and key are POSTed to it, as with
//
//	curl -fsS -H "Authorization: Bearer $RERUN_TOKEN" \
//	  --data-urlencode caller=alice --data-urlencode tool=mail \
//	  --data-urlencode key=mail-1 https://admin.example/tasks/rerun
//
// 204 lets the next call under the key run its task again.
func ExampleTasks_RerunHandler() {
	keys, err := ctoken.NewKeyring(ctoken.RandomKey()) // random: this process only; a fleet shares ctoken.KeyringFromEnv
	if err != nil {
		log.Fatal(err)
	}
	tasks, err := mcptoken.NewTasks(mcptoken.TasksConfig{Keys: keys, Store: replay.NewMemoryStore(0)})
	if err != nil {
		log.Fatal(err)
	}
	token := "s3cret-operator-token" // in production: from the environment
	rerun, err := tasks.RerunHandler(func(r *http.Request) (string, error) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			return "", nil // 401
		}
		return "ops", nil
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /tasks/rerun", rerun) // on an address only operators reach
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, bearer := range []string{"", token} {
		form := url.Values{"caller": {"alice"}, "tool": {"mail"}, "key": {"mail-1"}}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/tasks/rerun", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status) // mail-1 never created a task here: 404
	}
	// Output:
	// 401 Unauthorized
	// 404 Not Found
}
