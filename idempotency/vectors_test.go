package idempotency

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"testing"
)

// vectorFile is testdata/vectors.json, written by testdata/vectors.py
// from the documented formats, independently of this package.
type vectorFile struct {
	About   string `json:"about"`
	StoreID []struct {
		Caller, Route, Key, ID string
	} `json:"store_id"`
	Fingerprint []struct {
		Method          string `json:"method"`
		EscapedPath     string `json:"escaped_path"`
		RawQuery        string `json:"raw_query"`
		ContentType     string `json:"content_type"`
		ContentEncoding string `json:"content_encoding"`
		BodyHex         string `json:"body_hex"`
		FingerprintHex  string `json:"fingerprint_hex"`
	} `json:"fingerprint"`
	Response []struct {
		Status   int         `json:"status"`
		Header   [][2]string `json:"header"`
		BodyHex  string      `json:"body_hex"`
		TooLarge bool        `json:"too_large"`
		CBORHex  string      `json:"cbor_hex"`
	} `json:"response"`
	ResponseRejects []struct {
		Name    string `json:"name"`
		CBORHex string `json:"cbor_hex"`
	} `json:"response_rejects"`
	Key []struct {
		Header string `json:"header"`
		Key    string `json:"key"`
		Error  string `json:"error"`
	} `json:"key"`
}

func loadVectors(t testing.TB) vectorFile {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectorFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	if len(v.StoreID) == 0 || len(v.Fingerprint) == 0 || len(v.Response) == 0 || len(v.ResponseRejects) == 0 || len(v.Key) == 0 {
		t.Fatal("a section of the vectors is empty")
	}
	return v
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestVectors(t *testing.T) {
	v := loadVectors(t)
	t.Run("store ID", func(t *testing.T) {
		for _, c := range v.StoreID {
			if got := StoreID(c.Caller, c.Route, c.Key); got != c.ID {
				t.Errorf("StoreID(%q, %q, %q) = %s, want %s", c.Caller, c.Route, c.Key, got, c.ID)
			}
		}
	})
	t.Run("fingerprint", func(t *testing.T) {
		for _, c := range v.Fingerprint {
			h := http.Header{}
			if c.ContentType != "" {
				h.Set("Content-Type", c.ContentType)
			}
			if c.ContentEncoding != "" {
				h.Set("Content-Encoding", c.ContentEncoding)
			}
			got := Fingerprint(c.Method, c.EscapedPath, c.RawQuery, h, unhex(t, c.BodyHex))
			if hex.EncodeToString(got) != c.FingerprintHex {
				t.Errorf("Fingerprint(%s %s?%s, %q, %q, %s) = %x, want %s", c.Method, c.EscapedPath, c.RawQuery, c.ContentType, c.ContentEncoding, c.BodyHex, got, c.FingerprintHex)
			}
		}
	})
	t.Run("response encoding", func(t *testing.T) {
		for _, c := range v.Response {
			r := Response{Status: c.Status, Header: c.Header, Body: unhex(t, c.BodyHex), TooLarge: c.TooLarge}
			if len(r.Body) == 0 {
				r.Body = nil
			}
			if len(r.Header) == 0 {
				r.Header = nil
			}
			enc, err := EncodeResponse(r)
			if err != nil || hex.EncodeToString(enc) != c.CBORHex {
				t.Errorf("EncodeResponse(%d) = %x, %v; want %s", c.Status, enc, err, c.CBORHex)
			}
			dec, err := DecodeResponse(unhex(t, c.CBORHex))
			if err != nil || dec.Status != r.Status || dec.TooLarge != r.TooLarge || !bytes.Equal(dec.Body, r.Body) || len(dec.Header) != len(r.Header) {
				t.Errorf("DecodeResponse(%s) = %+v, %v", c.CBORHex, dec, err)
				continue
			}
			for i := range r.Header {
				if dec.Header[i] != r.Header[i] {
					t.Errorf("header %d = %q, want %q", i, dec.Header[i], r.Header[i])
				}
			}
		}
	})
	t.Run("response rejects", func(t *testing.T) {
		for _, c := range v.ResponseRejects {
			if r, err := DecodeResponse(unhex(t, c.CBORHex)); !errors.Is(err, ErrRecord) {
				t.Errorf("%s: DecodeResponse = %+v, %v; want ErrRecord", c.Name, r, err)
			}
		}
	})
	t.Run("key", func(t *testing.T) {
		for _, c := range v.Key {
			got, err := ParseKey(c.Header, DefaultMaxKeyBytes)
			var want error
			switch c.Error {
			case "length":
				want = errKeyLength
			case "malformed":
				want = errKeyMalformed
			}
			if err != want || got != c.Key {
				t.Errorf("ParseKey(%q) = %q, %v; want %q, %v", c.Header, got, err, c.Key, want)
			}
		}
	})
}
