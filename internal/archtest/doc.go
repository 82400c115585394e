// Package archtest holds no code: its test checks that the packages of the
// module form the layers that docs/architecture.md draws. A package may
// import only packages of lower layers; test files may also import the test
// harnesses. A new package must be given a layer in the table of the test.
package archtest
