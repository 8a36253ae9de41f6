package protopage_test

import (
	"errors"
	"log/slog"
	"math"
	"testing"

	"github.com/ctoken/ctoken"
	"github.com/ctoken/ctoken/protopage"
	"github.com/ctoken/ctoken/protopage/examples/librarypb"
	"github.com/ctoken/ctoken/protopage/internal/fingerprintpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// scalar returns the i-th (1 or 2) non-default value of a field of fd's
// kind, or of a map key of that kind.
func scalar(fd protoreflect.FieldDescriptor, i int, newMsg func() protoreflect.Message) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(i == 1)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(i))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(-i))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(-i) << 40)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(i))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(i) << 40)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(i) + 0.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(i) + 0.25)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(string(rune('a' + i)))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{byte(i)})
	}
	n := newMsg()
	n.Set(n.Descriptor().Fields().ByName("name"), protoreflect.ValueOfString(string(rune('a'+i))))
	return protoreflect.ValueOfMessage(n)
}

// TestFingerprintBindsEveryFieldOfEveryKind sets each field of a request
// with a field of every kind and cardinality to two values in turn: every
// one of the results has its own fingerprint, and none is the empty
// request's.
func TestFingerprintBindsEveryFieldOfEveryKind(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	seen := map[ctoken.Fingerprint]string{fingerprint(t, f.Pager, &fingerprintpb.Request{}): "empty"}
	fields := (&fingerprintpb.Request{}).ProtoReflect().Descriptor().Fields()
	for j := range fields.Len() {
		fd := fields.Get(j)
		if fd.Name() == "page_size" || fd.Name() == "page_token" {
			continue
		}
		for i := 1; i <= 2; i++ {
			req := &fingerprintpb.Request{}
			m := req.ProtoReflect()
			switch {
			case fd.IsMap():
				mp := m.Mutable(fd).Map()
				newMsg := func() protoreflect.Message { return mp.NewValue().Message() }
				for k := 1; k <= i+1; k++ { // several keys: their order is fixed by the encoding
					key := scalar(fd.MapKey(), k%2+1, nil).MapKey()
					if fd.MapKey().Kind() != protoreflect.BoolKind {
						key = scalar(fd.MapKey(), k, nil).MapKey()
					}
					mp.Set(key, scalar(fd.MapValue(), i, newMsg))
				}
			case fd.IsList():
				l := m.Mutable(fd).List()
				newMsg := func() protoreflect.Message { return l.NewElement().Message() }
				for k := 1; k <= i; k++ {
					l.Append(scalar(fd, k, newMsg))
				}
			case fd.Kind() == protoreflect.BoolKind && !fd.HasPresence() && i == 2:
				continue // false is the default: absent, like the empty request
			default:
				m.Set(fd, scalar(fd, i, func() protoreflect.Message { return m.NewField(fd).Message() }))
			}
			fp := fingerprint(t, f.Pager, req)
			name := string(fd.Name()) + "#" + string(rune('0'+i))
			if other, dup := seen[fp]; dup {
				t.Fatalf("%s and %s share a fingerprint", name, other)
			}
			seen[fp] = name
			for range 5 { // map iteration order is random
				if fingerprint(t, f.Pager, req) != fp {
					t.Fatalf("%s: the fingerprint depends on map order", name)
				}
			}
		}
	}
}

func TestFingerprintUnknownFieldOrder(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	a := protowire.AppendVarint(protowire.AppendTag(nil, 900, protowire.VarintType), 1)
	b := protowire.AppendBytes(protowire.AppendTag(nil, 700, protowire.BytesType), []byte("x"))
	b2 := protowire.AppendBytes(protowire.AppendTag(nil, 700, protowire.BytesType), []byte("y"))
	with := func(raw ...[]byte) ctoken.Fingerprint {
		r := &fingerprintpb.Request{FString: "s"}
		var u []byte
		for _, x := range raw {
			u = append(u, x...)
		}
		r.ProtoReflect().SetUnknown(u)
		return fingerprint(t, f.Pager, r)
	}
	if with(a, b, b2) != with(b, a, b2) || with(a, b, b2) != with(b, b2, a) {
		t.Error("the order of unknown fields of different numbers changed the fingerprint")
	}
	if with(a, b, b2) == with(a, b2, b) {
		t.Error("the order of one unknown number's records did not change the fingerprint")
	}
	for name, raw := range map[string][]byte{"bad tag": {0x80}, "no value": protowire.AppendTag(nil, 5, protowire.BytesType)} {
		r := &fingerprintpb.Request{}
		r.ProtoReflect().SetUnknown(raw)
		_, err := f.Pager.Fingerprint(r)
		if !errors.Is(err, protopage.ErrServer) || errors.Unwrap(err).Error() != "request carries malformed unknown fields" {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestPageSizeFieldMustBeAnInteger(t *testing.T) {
	f := newFixture(t, protopage.Config{PageSizeField: "f_string"})
	if _, err := f.Pager.Fingerprint(&fingerprintpb.Request{}); !errors.Is(err, protopage.ErrServer) {
		t.Fatalf("string page size field: %v", err)
	}
	for _, name := range []string{"f_uint64", "f_sfixed32", "f_sint64"} {
		g := newFixture(t, protopage.Config{PageSizeField: name})
		if _, err := g.Pager.Fingerprint(&fingerprintpb.Request{}); err != nil {
			t.Fatalf("%s as page size field: %v", name, err)
		}
	}
}

func TestNextRefusesPastTheLastIndexAndUnmarshallableState(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	req := listReq()
	fp := fingerprint(t, f.Pager, req)
	token, err := f.Issuer.Issue(ctoken.CursorPayload{CursorScope: ctoken.CursorScope{ToolID: listMethod, CallerID: "alice", Args: fp}, Page: math.MaxUint32})
	if err != nil {
		t.Fatal(err)
	}
	req.PageToken = token
	page, err := f.Pager.Start(callCtx(listMethod, "alice"), req)
	if err != nil || page.Index() != math.MaxUint32 {
		t.Fatalf("Start: %v", err)
	}
	if _, err := page.Next(nil); !errors.Is(err, protopage.ErrServer) {
		t.Fatalf("Next past the last index: %v", err)
	}
	first, err := f.Pager.Start(callCtx(listMethod, "alice"), listReq())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.NextMessage(&librarypb.BookKey{Title: "\xff"}); !errors.Is(err, protopage.ErrServer) {
		t.Fatalf("NextMessage of a message that does not marshal: %v", err)
	}
}

func TestFingerprintRefusesNestingDeeperThanMaxDepth(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	deep := func(n int) *fingerprintpb.Request {
		leaf := &fingerprintpb.Nested{Name: "leaf"}
		for range n {
			leaf = &fingerprintpb.Nested{Child: leaf}
		}
		return &fingerprintpb.Request{RMessage: []*fingerprintpb.Nested{leaf}}
	}
	if _, err := f.Pager.Fingerprint(deep(protopage.MaxDepth - 1)); err != nil {
		t.Fatalf("MaxDepth levels: %v", err)
	}
	_, err := f.Pager.Fingerprint(deep(protopage.MaxDepth + 1))
	if !errors.Is(err, protopage.ErrServer) {
		t.Fatalf("deeper than MaxDepth: %v", err)
	}
	req := deep(protopage.MaxDepth + 1)
	req.MBool = map[bool]*fingerprintpb.Nested{true: req.RMessage[0]}
	req.RMessage = nil
	if _, err := f.Pager.Start(callCtx(listMethod, "alice"), req); !errors.Is(err, protopage.ErrServer) {
		t.Fatalf("Start, deeper than MaxDepth in a map: %v", err)
	}
}

func TestStartWithAnIssuerNotMadeByItsConstructorIsAServerFault(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	token := firstToken(t, f, listReq())
	p, err := protopage.New(protopage.Config{Issuer: &ctoken.CursorIssuer{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	req := listReq()
	req.PageToken = token
	if _, err := p.Start(callCtx(listMethod, "alice"), req); !errors.Is(err, protopage.ErrServer) || !errors.Is(err, ctoken.ErrNoKey) {
		t.Fatalf("zero issuer: %v", err)
	}
}
