package sandbox

import (
	"os"
	"slices"
	"strings"
)

// defaultPath is the command's PATH unless --env passes another, as in a container image.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// execEnv builds the environment of a command `sandbox exec` runs, as `docker exec` does:
// a baseline (PATH, HOME (the working directory), HOSTNAME (the sandbox name), LANG, and TERM when stdin is a terminal), then the
// sandbox's env file unless o.NoEnv, then the variables o.Pass names (with o.NoEnv, a bare
// KEY among proxyEnvKeys is not taken from the caller). Nothing else of the
// caller's environment (o.Env) reaches the command: it may hold VAULT_TOKEN, or the variables
// the policy reads secrets from.
func execEnv(st *State, o ExecOptions) []string {
	caller := map[string]string{}
	for _, kv := range o.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			caller[k] = v
		}
	}
	home := DefaultWorkdir
	var imageEnv []string
	if c := st.Container; c != nil {
		home = c.Workdir
		if c.Home != "" {
			home = c.Home
		}
		if c.Image != nil {
			imageEnv = c.Image.Config.Env
		}
	}
	env := []string{"PATH=" + defaultPath, "HOME=" + home, "HOSTNAME=" + st.Name}
	lang := caller["LANG"]
	if lang == "" {
		lang = "C.UTF-8"
	}
	env = mergeEnv(append(env, "LANG="+lang), imageEnv) // the image's under the env file's
	if _, tty := isTerminal(os.Stdin); tty {
		term := caller["TERM"]
		if term == "" {
			term = "xterm"
		}
		env = append(env, "TERM="+term)
	}
	if !o.NoEnv && st.Network != NetworkNone {
		env = mergeEnv(env, st.EnvVars())
	}
	var pass []string
	for _, p := range o.Pass {
		if strings.Contains(p, "=") {
			pass = append(pass, p)
		} else if v, ok := caller[p]; ok && !(o.NoEnv && slices.Contains(proxyEnvKeys, p)) {
			// --no-env keeps the caller's proxy and trust settings out even when named.
			pass = append(pass, p+"="+v)
		}
	}
	return mergeEnv(env, pass)
}
