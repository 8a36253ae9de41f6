package replay_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ctoken/ctoken/replay"
)

func TestCheckRecordLimits(t *testing.T) {
	tests := []struct {
		name        string
		fingerprint []byte
		result      []byte
		ok          bool
	}{
		{"no fingerprint, one-byte result", nil, []byte{0}, true},
		{"fingerprint and result at their limits", bytes.Repeat([]byte{1}, replay.MaxFingerprintBytes), make([]byte, replay.MaxResultBytes), true},
		{"fingerprint one byte over", bytes.Repeat([]byte{1}, replay.MaxFingerprintBytes+1), []byte{0}, false},
		{"empty result", nil, []byte{}, false},
		{"nil result", nil, nil, false},
		{"result one byte over", nil, make([]byte, replay.MaxResultBytes+1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := replay.CheckRecord(tt.fingerprint, tt.result)
			if tt.ok != (err == nil) || err != nil && !errors.Is(err, replay.ErrTooLarge) {
				t.Fatalf("CheckRecord = %v; want ok %v, else ErrTooLarge", err, tt.ok)
			}
			fpErr := replay.CheckFingerprint(tt.fingerprint)
			if wantFP := len(tt.fingerprint) <= replay.MaxFingerprintBytes; wantFP != (fpErr == nil) || fpErr != nil && !errors.Is(fpErr, replay.ErrTooLarge) {
				t.Fatalf("CheckFingerprint = %v; want ok %v, else ErrTooLarge", fpErr, wantFP)
			}
		})
	}
}
