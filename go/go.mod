module github.com/ratekeeper/ratekeeper/go

go 1.19
