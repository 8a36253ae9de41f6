//go:build !linux

package sqlitestore

import "errors"

// writebackLooks says whether a check's fsync of the database file
// reports write-backs that failed in other connections: Linux's errseq
// only.
const writebackLooks = false

// privateFile is Linux's (privatefile_linux.go): here openPrivate always
// fails, and the database file is read through a keptFile.
type privateFile struct{}

func openPrivate(string) (*privateFile, error) { return nil, errors.ErrUnsupported }

func (*privateFile) ReadAt([]byte, int64) (int, error) { return 0, errors.ErrUnsupported }
func (*privateFile) Size() (int64, error)              { return 0, errors.ErrUnsupported }
func (*privateFile) Sync() error                       { return errors.ErrUnsupported }
func (*privateFile) Close()                            {}
func (*privateFile) release()                          {}
