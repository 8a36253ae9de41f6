package ctoken

import (
	"bytes"
	"encoding/hex"

	"github.com/ctoken/ctoken/internal/mac"
)

// bindTagLen is the length of a bind tag: hex of an HMAC-SHA256.
const bindTagLen = 2 * macSize

// bindTag appends hex(HMAC-SHA256(bindKey, material)) to dst, without the
// cache of cachedBindTag (tests compare the two).
func (c *RequestStateCodec) bindTag(dst []byte, key int, subject, tool string) []byte {
	var sc stateScratch
	return c.cachedBindTag(dst, &sc, make([]byte, 0, c.materialCap(subject, tool)), c.ring().bind[key], subject, tool)
}

// materialCap is the most bytes the bind material of subject and tool takes.
func (c *RequestStateCodec) materialCap(subject, tool string) int {
	n := len(subject) + 1 + len(tool)
	if c.audience != "" {
		n += len(c.audience) + 1
	}
	return n
}

// cachedBindTag appends hex(HMAC-SHA256(bindKey, material)) to dst. The
// material is the subject under [BindSubject], subject + "\x00" + tool under
// [BindSubjectAndTool] (an empty subject included) and empty under [BindNone],
// preceded by audience + "\x00" when the codec has an audience (whose bind
// key is then the audience bind subkey).
//
// Tags are cached in the pooled scratch sc, a handful per scratch, keyed by
// the bind subkey (its identity: a [KeySource] swap brings new subkeys, so a
// tag of the old ring is never served for the new one) and a copy of the material (so a caller's string that is
// later reused for other bytes cannot produce a stale hit): the tag is a
// pure function of the two, and it costs as much as the whole AES-GCM open
// it guards. A scratch belongs to one goroutine between Get and Put, so the
// cache needs no lock; sync.Pool drops it at garbage collection, so it
// stays small. A hit or a miss reveals only whether the same material was
// served recently on the same P, never a secret. material is heap memory
// with capacity for the material (a slice handed to the HMAC escapes, so a
// stack buffer would cost an allocation); dst does not escape.
func (c *RequestStateCodec) cachedBindTag(dst []byte, sc *stateScratch, material []byte, k *mac.Key, subject, tool string) []byte {
	material = material[:0]
	if c.audience != "" {
		material = append(append(material, c.audience...), 0)
	}
	switch c.binding {
	case BindSubject:
		material = append(material, subject...)
	case BindSubjectAndTool:
		material = append(append(append(material, subject...), 0), tool...)
	}
	cacheable := len(material) <= maxCachedMaterial
	if cacheable {
		for i := range sc.tags[:sc.used] {
			if e := &sc.tags[i]; e.key == k && bytes.Equal(e.material[:e.n], material) {
				return append(dst, e.tag[:]...)
			}
		}
	}
	st := k.Begin()
	st.Write(material)
	var tag [bindTagLen]byte
	hex.Encode(tag[:], st.Tag()[:])
	k.End(st)
	if cacheable {
		e := &sc.tags[sc.next]
		e.key, e.n, e.tag = k, len(material), tag
		copy(e.material[:], material)
		sc.next = (sc.next + 1) % uint8(len(sc.tags))
		if int(sc.used) < len(sc.tags) {
			sc.used++
		}
	}
	return append(dst, tag[:]...)
}

// maxCachedMaterial is the longest bind material whose tag is cached.
const maxCachedMaterial = 128

// tagEntry is a cached bind tag: the tag of material[:n] under key.
type tagEntry struct {
	key      *mac.Key
	n        int
	material [maxCachedMaterial]byte
	tag      [bindTagLen]byte
}

// stateScratch is pooled working memory of Encode and Decode; see
// getScratch.
type stateScratch struct {
	buf  []byte
	tags [4]tagEntry
	next uint8 // the entry a miss replaces
	used uint8 // entries in use
}

// maxPooledScratch is the largest scratch buffer kept for reuse, so a
// codec configured with a huge MaxBytes does not pin huge buffers.
const maxPooledScratch = 256 << 10

// getScratch returns pooled working memory with capacity of at least n.
func (c *RequestStateCodec) getScratch(n int) *stateScratch {
	sc, _ := c.scratch.Get().(*stateScratch)
	if sc == nil {
		sc = new(stateScratch)
	}
	if cap(sc.buf) < n {
		sc.buf = make([]byte, 0, max(n, 512))
	}
	return sc
}

func (c *RequestStateCodec) putScratch(sc *stateScratch) {
	if cap(sc.buf) <= maxPooledScratch {
		c.scratch.Put(sc)
	}
}

// region returns buf[off:off] with capacity n, so appends to it never run
// into the next region (at worst they reallocate).
func region(buf []byte, off, n int) []byte { return buf[off:off:min(off+n, cap(buf))] }
