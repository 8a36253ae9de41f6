module github.com/ctoken/ctoken

go 1.24
