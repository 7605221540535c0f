// Package snippets holds the README's Go code blocks as code that compiles.
//
// Each block is the text between a "// readme:begin NAME" and a
// "// readme:end" comment in one of this package's files, less the
// function's indentation; quickstart/main.go is the inbox quick start whole,
// a program of its own. TestReadmeSnippets fails when a README block and its
// region differ, or when a region is in no block, so the README cannot drift
// from code that compiles; TestQuickStart builds the quick start in a fresh
// module and runs it against a test database. To change a block, change its
// region here and copy it into the README (the test's failure shows the
// first line that differs).
//
// The functions are never called: they exist to be compiled and vetted.
package snippets
