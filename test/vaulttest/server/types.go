package main

import "github.com/hashicorp/vault/api"

type (
	mountInput = api.MountInput
	authInput  = api.EnableAuthOptions
)
