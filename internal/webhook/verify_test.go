package webhook

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSignVerify(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"7-0","type":"job.state_changed"}`)
	sig := Sign(testSecret, "1767268800", body)
	require.True(t, strings.HasPrefix(sig, "sha256="))
	require.Len(t, sig, len("sha256=")+64)
	require.NoError(t, Verify(testSecret, sig, "1767268800", body))

	for name, err := range map[string]error{
		"wrong secret":      Verify("another-secret-entirely", sig, "1767268800", body),
		"other body":        Verify(testSecret, sig, "1767268800", []byte(`{"id":"7-1"}`)),
		"other timestamp":   Verify(testSecret, sig, "1767268801", body),
		"missing timestamp": Verify(testSecret, sig, "", body),
		"no prefix":         Verify(testSecret, strings.TrimPrefix(sig, "sha256="), "1767268800", body),
		"not hex":           Verify(testSecret, "sha256=zz", "1767268800", body),
		"empty":             Verify(testSecret, "", "1767268800", body),
	} {
		require.Error(t, err, name)
	}

	// The signed content is exactly "<timestamp>.<body>": a fixed vector,
	// the one docs/events.md checks with openssl.
	require.Equal(t, "sha256=e29787afd0bc89c41c3e4f7d7d0fb820ccab70324ba3b51320ddbfcc75aa4416",
		Sign("whsec-0123456789abcdef", "1767268800", []byte(`{"id":"7-0"}`)))
}

// docs/events.md shows Verify for receivers to copy: it must be this
// function, character for character.
func TestDocsShowVerify(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("verify.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "verify.go", src, parser.ParseComments)
	require.NoError(t, err)
	var fn string
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "Verify" {
			fn = string(src[fset.Position(fd.Doc.Pos()).Offset:fset.Position(fd.End()).Offset])
		}
	}
	require.NotEmpty(t, fn)
	doc, err := os.ReadFile("../../docs/events.md")
	require.NoError(t, err)
	require.Contains(t, string(doc), fn, "docs/events.md must show webhook.Verify as it is in verify.go")
}
