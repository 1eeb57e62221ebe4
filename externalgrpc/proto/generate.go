// Package protos holds the externalgrpc protocol: our .proto, written from
// the spec, and the code generated from it. Run `make generate` after
// editing externalgrpc.proto; CI checks the generated code is current.
package protos

//go:generate protoc -I . -I /usr/include --plugin=protoc-gen-go=../../bin/protoc-gen-go --plugin=protoc-gen-go-grpc=../../bin/protoc-gen-go-grpc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative externalgrpc.proto
