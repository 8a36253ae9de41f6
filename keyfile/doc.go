// Package keyfile reads ctoken's key ring from a file (a mounted Secret, a
// file a deployment writes) and keeps it in step with the file, so keys
// rotate without a restart. Most users need one call: [NewSource], whose
// [ctoken.KeySource] they give to the configs of their issuers and
// codecs; ExampleNewSource is that path, from the file to a cursor.
//
// The first read fails loudly (a missing, malformed, short or
// world-writable file is an error, never a random key), and a later bad
// change keeps the current ring and is reported. To reload on a signal as
// well, or to stop other than by a context, use a [Reloader].
package keyfile
