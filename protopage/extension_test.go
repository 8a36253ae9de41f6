package protopage_test

import (
	"testing"

	"github.com/ctoken/ctoken/protopage"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// proto2File builds, at run time, a proto2 request with an extension range
// and two extensions:
//
//	message Req { optional string page_token = 1; optional int32 page_size = 2;
//	              optional string filter = 3; extensions 100 to 200; }
//	extend Req { optional string ext_a = 150; optional int64 ext_b = 120; }
func proto2File(t *testing.T) (protoreflect.MessageDescriptor, protoreflect.ExtensionType, protoreflect.ExtensionType) {
	t.Helper()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	str, i32, i64 := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(), descriptorpb.FieldDescriptorProto_TYPE_INT32.Enum(), descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum()
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("ext_test.proto"),
		Package: proto.String("ctoken.protopage.exttest"),
		Syntax:  proto.String("proto2"),
		MessageType: []*descriptorpb.DescriptorProto{{
			Name: proto.String("Req"),
			Field: []*descriptorpb.FieldDescriptorProto{
				{Name: proto.String("page_token"), Number: proto.Int32(1), Label: opt, Type: str},
				{Name: proto.String("page_size"), Number: proto.Int32(2), Label: opt, Type: i32},
				{Name: proto.String("filter"), Number: proto.Int32(3), Label: opt, Type: str},
			},
			ExtensionRange: []*descriptorpb.DescriptorProto_ExtensionRange{{Start: proto.Int32(100), End: proto.Int32(201)}},
		}},
		Extension: []*descriptorpb.FieldDescriptorProto{
			{Name: proto.String("ext_a"), Number: proto.Int32(150), Label: opt, Type: str, Extendee: proto.String(".ctoken.protopage.exttest.Req")},
			{Name: proto.String("ext_b"), Number: proto.Int32(120), Label: opt, Type: i64, Extendee: proto.String(".ctoken.protopage.exttest.Req")},
		},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().Get(0), dynamicpb.NewExtensionType(fd.Extensions().Get(0)), dynamicpb.NewExtensionType(fd.Extensions().Get(1))
}

// TestFingerprintBindsExtensionsAndProto2Presence covers messages with
// extension ranges (proto2): set extensions are bound like fields, in
// field-number order; a proto2 field set to its default differs from
// absent; and messages of two descriptors of one name never mix.
func TestFingerprintBindsExtensionsAndProto2Presence(t *testing.T) {
	f := newFixture(t, protopage.Config{})
	md, extA, extB := proto2File(t)
	msg := func(edit func(m *dynamicpb.Message)) *dynamicpb.Message {
		m := dynamicpb.NewMessage(md)
		m.Set(md.Fields().ByName("filter"), protoreflect.ValueOfString("x"))
		edit(m)
		return m
	}
	none := func(*dynamicpb.Message) {}
	ref := fingerprint(t, f.Pager, msg(none))
	withExt := fingerprint(t, f.Pager, msg(func(m *dynamicpb.Message) {
		m.Set(extA.TypeDescriptor(), protoreflect.ValueOfString("a"))
		m.Set(extB.TypeDescriptor(), protoreflect.ValueOfInt64(7))
	}))
	if withExt == ref {
		t.Fatal("extensions are not bound")
	}
	otherExt := fingerprint(t, f.Pager, msg(func(m *dynamicpb.Message) {
		m.Set(extA.TypeDescriptor(), protoreflect.ValueOfString("a"))
		m.Set(extB.TypeDescriptor(), protoreflect.ValueOfInt64(8))
	}))
	if otherExt == withExt {
		t.Fatal("an extension's value is not bound")
	}
	// Extensions set in the other order, and page fields set, change nothing.
	again := fingerprint(t, f.Pager, msg(func(m *dynamicpb.Message) {
		m.Set(extB.TypeDescriptor(), protoreflect.ValueOfInt64(7))
		m.Set(extA.TypeDescriptor(), protoreflect.ValueOfString("a"))
		m.Set(md.Fields().ByName("page_size"), protoreflect.ValueOfInt32(3))
		m.Set(md.Fields().ByName("page_token"), protoreflect.ValueOfString("t"))
	}))
	if again != withExt {
		t.Fatal("the order extensions were set in, or the page fields, changed the fingerprint")
	}
	if fingerprint(t, f.Pager, msg(func(m *dynamicpb.Message) {
		m.Set(md.Fields().ByName("filter"), protoreflect.ValueOfString(""))
	})) == fingerprint(t, f.Pager, dynamicpb.NewMessage(md)) {
		t.Fatal("a proto2 field set to its default is bound as absent")
	}
	// A second descriptor of the same name, built again: same encoding,
	// so the same fingerprint for the same content.
	md2, _, _ := proto2File(t)
	m2 := dynamicpb.NewMessage(md2)
	m2.Set(md2.Fields().ByName("filter"), protoreflect.ValueOfString("x"))
	if fingerprint(t, f.Pager, m2) != ref {
		t.Fatal("two descriptors of one schema disagree")
	}
}
