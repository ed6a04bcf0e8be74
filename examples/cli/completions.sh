#!/usr/bin/env bash
# Shell completions and man pages for your user, from the `ratekeeper` of any package (pip, npm
# or the C tarball, which also ships them under share/): where bash-completion, zsh, fish and man
# look in your home directory.
set -euo pipefail
mkdir -p ~/.local/share/bash-completion/completions ~/.zfunc ~/.config/fish/completions \
  ~/.local/share/man/man1
ratekeeper completions bash >~/.local/share/bash-completion/completions/ratekeeper
ratekeeper completions zsh >~/.zfunc/_ratekeeper # with `fpath+=~/.zfunc` in ~/.zshrc
ratekeeper completions fish >~/.config/fish/completions/ratekeeper.fish
ratekeeper man-pages ~/.local/share/man/man1 # then: man ratekeeper, man ratekeeper-run
