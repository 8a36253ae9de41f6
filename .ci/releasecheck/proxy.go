package main

import (
	"errors"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// authoritative serves the file proxy at dir over HTTP as the only source
// of this repository's modules: a request for a path under rootPath gets
// the packed file, or 403 when it was not packed, which stops the go
// command (it falls through to the next GOPROXY entry only on 404 and
// 410). Every other path gets 404, so the next entries (this machine's
// module cache, the configured proxy) serve the third-party modules. A
// version of ours that some later entry already holds, a release
// published before, or a copy left in the module cache, is never
// consulted: the check is hermetic for the modules it releases.
func authoritative(dir string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := path.Clean("/" + r.URL.Path)
		if p != "/"+rootPath && !strings.HasPrefix(p, "/"+rootPath+"/") {
			http.NotFound(w, r)
			return
		}
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(p, "/"))))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				// 403, not 404: a module of ours the release does not pack
				// must not be looked for anywhere else.
				http.Error(w, "release check: not packed in this release: "+p, http.StatusForbidden)
				return
			}
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write(data)
	})
}

// serveProxy serves authoritative(dir) on a loopback port and returns its
// URL and a function that stops it.
func serveProxy(dir string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: authoritative(dir)}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}
