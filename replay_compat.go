package ctoken

import "github.com/ctoken/ctoken/replay"

// The replay store moved to package [replay]. These aliases keep the old
// root names compiling while the root package migrates; they are removed
// before the release.

// ReplayStore is [replay.Store].
//
// Deprecated: use [replay.Store].
type ReplayStore = replay.Store

// ReplayReleaser is [replay.Releaser].
//
// Deprecated: use [replay.Releaser].
type ReplayReleaser = replay.Releaser

// MemoryReplayStore is [replay.MemoryStore].
//
// Deprecated: use [replay.MemoryStore].
type MemoryReplayStore = replay.MemoryStore

// NewMemoryReplayStore is [replay.NewMemoryStore].
//
// Deprecated: use [replay.NewMemoryStore].
func NewMemoryReplayStore(max int) *MemoryReplayStore { return replay.NewMemoryStore(max) }

// ErrReplayStoreFull is [replay.ErrFull].
//
// Deprecated: use [replay.ErrFull].
var ErrReplayStoreFull = replay.ErrFull

// DefaultReplayStoreMax is [replay.DefaultMax].
//
// Deprecated: use [replay.DefaultMax].
const DefaultReplayStoreMax = replay.DefaultMax

// replaySkewMargin is [replay.SkewMargin].
const replaySkewMargin = replay.SkewMargin
