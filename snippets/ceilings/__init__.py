"""The two ceilings every other lab is measured against: copy bandwidth and matmul peak."""
