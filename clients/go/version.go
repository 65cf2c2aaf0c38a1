package leasehold

// Version is this client's version, the same as the VERSION file beside
// it. The module is published by tagging the repository with
// "clients/go/v" + Version (a Go module in a subdirectory is tagged with
// its path).
const Version = "0.1.0"
