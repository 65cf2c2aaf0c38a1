module github.com/leasehold/leasehold/clients/go/examples/two-workers

go 1.26.0

require github.com/leasehold/leasehold/clients/go v0.1.0

// Until the client is fetched from its tag (clients/go/v0.1.0), it is
// built from this checkout.
replace github.com/leasehold/leasehold/clients/go => ../..

require (
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
