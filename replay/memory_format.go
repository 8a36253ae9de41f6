package replay

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
)

// A MemoryStore prints counts, never what it holds: under every fmt verb
// (%v %+v %#v %s %q %x ...) and through log/slog it describes itself as
// its entry and record counts, the bytes of its records and its limits,
// never a recorded fingerprint or result, an ID or a lease token. (It is
// used by pointer: go vet's copylocks check refuses a copy.)

// describe is the store's description.
func (s *MemoryStore) describe() string {
	if s == nil {
		return "replay.MemoryStore(nil)"
	}
	s.lockState()
	live, records, held := s.lenLocked(), len(s.st.records), s.st.held
	s.mu.Unlock()
	return fmt.Sprintf("replay.MemoryStore(%d live entries, %d records of %d bytes; Max %d, MaxRecordBytes %d)",
		live, records, held, s.max(), s.maxRecordBytes())
}

// String describes the store by its counts and limits: never a recorded
// byte.
func (s *MemoryStore) String() string { return s.describe() }

// Format prints [MemoryStore.String] under every verb (quoted for %q):
// never a recorded byte.
func (s *MemoryStore) Format(f fmt.State, verb rune) {
	d := s.describe()
	if verb == 'q' {
		d = strconv.Quote(d)
	}
	io.WriteString(f, d)
}

// LogValue is the store's log/slog form, [MemoryStore.String]: never a
// recorded byte.
func (s *MemoryStore) LogValue() slog.Value { return slog.StringValue(s.describe()) }
