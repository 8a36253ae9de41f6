package protopage

import (
	"github.com/ctoken/ctoken"
	"google.golang.org/protobuf/proto"
)

// FingerprintInput returns the bytes Pager.Fingerprint hashes for req, for
// the benchmarks' floor (SHA-256 of the same bytes).
func FingerprintInput(p *Pager, req proto.Message) ([]byte, error) {
	m := req.ProtoReflect()
	token, size, err := p.pageFields(m.Descriptor())
	if err != nil {
		return nil, err
	}
	e := encoder{plans: p.plans}
	err = e.request(m, token.Number(), size.Number(), 0)
	return e.buf, err
}

var _ ctoken.Fingerprint
