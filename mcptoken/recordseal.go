package mcptoken

import (
	"encoding/binary"
	"errors"

	"github.com/ctoken/ctoken/internal/ringkey"
	"github.com/ctoken/ctoken/internal/xaes"
	"github.com/ctoken/ctoken/replay"
)

// Sealing of the results the engine records (idempotent tool calls) and of
// the results of the rounds [States.Answer] records, as the idempotency
// middleware seals its responses: the store holds each result encrypted
// and authenticated, never in clear, bound to its store ID and fingerprint
// so that a record edited in the store, or moved to another ID or call,
// does not open.
//
//	record = version (1 byte, 1) || key id (4 bytes) || nonce (24 bytes) || ciphertext || tag (16 bytes)
//
// under XAES-256-GCM with a subkey of the primary key (HKDF label
// recordSealLabel for a tool call's result, roundSealLabel for a round's;
// the key id names the key), with associated data the version, the key
// id, the store ID (8-byte big-endian length, then the ID) and the
// fingerprint. The two labels give the two kinds of record keys of their
// own, so that neither ever opens as the other, even under one ring.
const (
	recordSealVersion = 1
	recordSealLabel   = "ctoken.mcp idempotent result xaes-256-gcm key"
	roundSealLabel    = "ctoken.mcp round result xaes-256-gcm key"
	recordHeaderSize  = 1 + ringkey.IDSize
	recordOverhead    = recordHeaderSize + xaes.Overhead
	// maxRecordedResult is the longest result that seals within
	// replay.MaxResultBytes.
	maxRecordedResult = replay.MaxResultBytes - recordOverhead
)

// errRecordForged: a record that does not open (edited, moved, sealed
// under a key no longer in the ring, or malformed).
var errRecordForged = errors.New("record does not open")

// recordSealer seals and opens recorded results with the keys of a ring,
// primary first. It is safe for concurrent use.
type recordSealer struct {
	ids   [][ringkey.IDSize]byte
	aeads []*xaes.AEAD
}

// newRecordSealer returns the sealer of the results of idempotent tool
// calls under ring (a *ctoken.Keyring), or false for a nil or zero ring.
func newRecordSealer(ring any) (*recordSealer, bool) { return newSealer(ring, recordSealLabel) }

// newSealer returns the sealer of ring (a *ctoken.Keyring) under the
// subkeys for label, or false for a nil or zero ring.
func newSealer(ring any, label string) (*recordSealer, bool) {
	subs, ok := ringkey.Derive(ring, label)
	if !ok || len(subs) == 0 {
		return nil, false
	}
	s := &recordSealer{ids: make([][ringkey.IDSize]byte, len(subs)), aeads: make([]*xaes.AEAD, len(subs))}
	for i, sub := range subs {
		a, err := xaes.New(sub.Key)
		if err != nil {
			return nil, false
		}
		s.ids[i], s.aeads[i] = sub.ID, a
	}
	return s, true
}

// recordAD returns the associated data of a record.
func recordAD(header []byte, id string, fp []byte) []byte {
	ad := make([]byte, 0, len(header)+8+len(id)+len(fp))
	ad = append(ad, header...)
	ad = binary.BigEndian.AppendUint64(ad, uint64(len(id)))
	ad = append(ad, id...)
	return append(ad, fp...)
}

// seal returns the record of result under id and fp, or replay.ErrTooLarge
// for a result over maxRecordedResult.
func (s *recordSealer) seal(id string, fp, result []byte) ([]byte, error) {
	if len(result) > maxRecordedResult {
		return nil, replay.ErrTooLarge
	}
	out := make([]byte, recordHeaderSize, recordOverhead+len(result))
	out[0] = recordSealVersion
	copy(out[1:], s.ids[0][:])
	return s.aeads[0].Seal(out, result, recordAD(out[:recordHeaderSize], id, fp)), nil
}

// open returns the result a record of id and fp holds, or errRecordForged.
func (s *recordSealer) open(id string, fp, record []byte) ([]byte, error) {
	if len(record) < recordOverhead || len(record) > replay.MaxResultBytes || record[0] != recordSealVersion {
		return nil, errRecordForged
	}
	for i := range s.ids {
		if string(s.ids[i][:]) == string(record[1:recordHeaderSize]) { //ctcheck:ok a key id names a key, it is not a secret
			pt, err := s.aeads[i].Open(nil, record[recordHeaderSize:], recordAD(record[:recordHeaderSize], id, fp))
			if err != nil {
				return nil, errRecordForged
			}
			return pt, nil
		}
	}
	return nil, errRecordForged
}
