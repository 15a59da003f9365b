package protocol

import (
	"testing"
)

func FuzzParseDecrypted(f *testing.F) {
	f.Add([]byte(`{"kind":"item","app":"query","item":"a"}`))
	f.Add([]byte(`{"kind":"closed","partition":1,"partitions":4}`))
	f.Fuzz(func(t *testing.T, b []byte) { ParseDecrypted(b) })
}
