"""Generated from proto/leasehold/v1/leasehold.proto by clients/generate.sh. Do not edit."""
