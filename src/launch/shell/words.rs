//! The words of a `sh -c` string: a POSIX word splitter that expands
//! `$NAME`, `${NAME}` and a whole-word `"$@"`, and refuses what it cannot
//! read safely (the list is in `mod.rs`). A token is read as the shell's
//! lexer reads it, before expansion: one that expands to no word
//! (`$EMPTY`) still makes a `#` after it part of a word, no comment, and
//! ends the command's assignments (`$EMPTY A=1 cmd` runs `A=1`). Crates
//! such as `shell-words` and `shlex` split words but neither expand
//! variables nor tell an operator from a word, which is what deciding
//! "safe" needs, hence this small hand-written splitter.

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// A shell variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_name(s: &str) -> bool {
    s.chars().next().is_some_and(is_name_start) && s.chars().all(is_name_char)
}

/// `script` without its line continuations: a backslash-newline outside
/// single quotes is removed before the shell reads words or names, so that
/// `$V\<newline>a` is `$Va`.
pub(super) fn join_lines(script: &str) -> Vec<char> {
    let chars: Vec<char> = script.chars().collect();
    let mut out = Vec::with_capacity(chars.len());
    let (mut single, mut double) = (false, false);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if single {
            single = c != '\'';
            out.push(c);
            continue;
        }
        match c {
            '\\' => match chars.get(i) {
                Some('\n') => i += 1,
                Some(&n) => {
                    out.extend([c, n]);
                    i += 1;
                }
                None => out.push(c),
            },
            '\'' if !double => {
                single = true;
                out.push(c);
            }
            // a comment, up to the newline: a backslash in it continues
            // no line, a quote in it opens nothing
            '#' if !double && out.last().is_none_or(|p| " \t\n;&|()<>".contains(*p)) => {
                out.push(c);
                while let Some(&k) = chars.get(i).filter(|&&k| k != '\n') {
                    out.push(k);
                    i += 1;
                }
            }
            '"' => {
                double = !double;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

/// Every variable name `script` expands (`$NAME`, `${NAME...}`), in order,
/// once each: what a string keepwrap cannot read depends on.
pub fn names(script: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let b = script.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            i += 1;
            continue;
        }
        i += 1;
        if b.get(i) == Some(&b'{') {
            i += 1;
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        let name = &script[start..i];
        if is_name(name) && !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    }
    out
}

/// What ended a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sep {
    /// `;` or `&&`
    Operator,
    Newline,
}

/// The word splitter's state: where it is in the script, the words so far
/// and the word being read.
pub(super) struct Splitter<'a> {
    chars: &'a [char],
    i: usize,
    env: &'a dyn Fn(&str) -> Option<String>,
    positional: &'a [String],
    /// each word with the byte position of its assignment `=`, if any
    words: Vec<(String, Option<usize>)>,
    cur: String,
    /// the word exists (it has content or quotes)
    started: bool,
    /// a token is being read, even one that may expand to no word
    /// (`$EMPTY`): a `#` here is part of it, no comment
    token: bool,
    /// every word of the command so far is an assignment
    assigning: bool,
    /// a token among the assignments expanded to no word: the next word is
    /// the command's name, whatever `=` it holds
    vanished: bool,
    /// byte position of the first unquoted `=` when everything before it
    /// was plain unquoted name characters
    eq: Option<usize>,
    plain_so_far: bool,
}

impl<'a> Splitter<'a> {
    pub(super) fn new(
        chars: &'a [char],
        i: usize,
        env: &'a dyn Fn(&str) -> Option<String>,
        positional: &'a [String],
    ) -> Splitter<'a> {
        Splitter {
            chars,
            i,
            env,
            positional,
            words: Vec::new(),
            cur: String::new(),
            started: false,
            token: false,
            assigning: true,
            vanished: false,
            eq: None,
            plain_so_far: true,
        }
    }

    /// The words of one command, where the next one starts and what ended
    /// this one (`None`: the end of the script), or why it is refused.
    #[allow(clippy::type_complexity)]
    pub(super) fn statement(
        mut self,
    ) -> Result<(Vec<(String, Option<usize>)>, usize, Option<Sep>), &'static str> {
        let mut sep = None;
        while let Some(&c) = self.chars.get(self.i) {
            match c {
                ' ' | '\t' => self.blank(),
                '\n' => {
                    self.i += 1;
                    sep = Some(Sep::Newline);
                    break;
                }
                ';' if self.chars.get(self.i + 1) != Some(&';') => {
                    self.i += 1;
                    sep = Some(Sep::Operator);
                    break;
                }
                '&' if self.chars.get(self.i + 1) == Some(&'&') => {
                    self.i += 2;
                    sep = Some(Sep::Operator);
                    break;
                }
                '#' if !self.token => {
                    while self.chars.get(self.i).is_some_and(|&c| c != '\n') {
                        self.i += 1;
                    }
                }
                '\'' => self.single_quoted()?,
                '"' if self.at_all_positional() => self.all_positional(),
                '"' => self.double_quoted()?,
                '\\' => self.backslash()?,
                '$' => self.unquoted_expansion()?,
                '|' | '&' | ';' | '<' | '>' | '(' | ')' => {
                    return Err("a shell operator (|, &&, ;, redirection, subshell)")
                }
                '`' => return Err("command substitution"),
                '*' | '?' | '[' => return Err("a glob pattern"),
                '{' | '}' => return Err("brace expansion"),
                // bash also expands `NAME=~...` in arguments: any unquoted ~
                '~' => return Err("a tilde"),
                _ => self.plain(c),
            }
        }
        self.end_token();
        Ok((self.words, self.i, sep))
    }

    /// A blank ends the word being read, if any.
    fn blank(&mut self) {
        self.end_token();
        self.i += 1;
    }

    /// The end of a token: its word, if it expanded to one. A token that
    /// expanded to none still took its place: after it, no word is an
    /// assignment (`$EMPTY A=1 cmd` runs the command `A=1`).
    fn end_token(&mut self) {
        if self.started {
            let eq = if std::mem::take(&mut self.vanished) {
                None
            } else {
                self.eq
            };
            self.assigning &= eq.is_some();
            self.words.push((std::mem::take(&mut self.cur), eq));
        } else if self.token && self.assigning {
            self.vanished = true;
            self.assigning = false;
        }
        self.started = false;
        self.token = false;
        self.eq = None;
        self.plain_so_far = true;
    }

    /// `'...'`: every character as it is.
    fn single_quoted(&mut self) -> Result<(), &'static str> {
        let i = self.i;
        let end = self.chars[i + 1..]
            .iter()
            .position(|&c| c == '\'')
            .ok_or("an unterminated quote")?;
        self.cur.extend(&self.chars[i + 1..i + 1 + end]);
        self.started = true;
        self.token = true;
        self.plain_so_far = false;
        self.i += end + 2;
        Ok(())
    }

    /// A whole-word `"$@"` at the start of a token (not after `$EMPTY`).
    fn at_all_positional(&self) -> bool {
        let i = self.i;
        !self.token
            && self.chars[i..].starts_with(&['"', '$', '@', '"'])
            && self.chars.get(i + 4).is_none_or(|c| c.is_whitespace())
    }

    /// `"$@"`: the positional parameters, one word each.
    fn all_positional(&mut self) {
        if self.positional.is_empty() {
            self.vanished |= self.assigning;
        } else {
            self.vanished = false;
        }
        self.assigning = false;
        self.words
            .extend(self.positional.iter().map(|p| (p.clone(), None)));
        self.i += 4;
    }

    /// `"..."`: backslash escapes and `$NAME` expansions, not split.
    fn double_quoted(&mut self) -> Result<(), &'static str> {
        self.i += 1;
        self.started = true;
        self.token = true;
        self.plain_so_far = false;
        loop {
            match self.chars.get(self.i) {
                None => return Err("an unterminated quote"),
                Some('"') => {
                    self.i += 1;
                    return Ok(());
                }
                Some('\\') => match self.chars.get(self.i + 1) {
                    Some(&n @ ('$' | '`' | '"' | '\\')) => {
                        self.cur.push(n);
                        self.i += 2;
                    }
                    Some('\n') => self.i += 2,
                    _ => {
                        self.cur.push('\\');
                        self.i += 1;
                    }
                },
                Some('`') => return Err("command substitution"),
                Some('$') => {
                    self.i += 1;
                    match self.expand()? {
                        Some(v) => self.cur.push_str(&v),
                        None => self.cur.push('$'),
                    }
                }
                Some(&c) => {
                    self.cur.push(c);
                    self.i += 1;
                }
            }
        }
    }

    /// An unquoted backslash: the next character as it is, or a line
    /// continuation.
    fn backslash(&mut self) -> Result<(), &'static str> {
        match self.chars.get(self.i + 1) {
            Some('\n') => self.i += 2,
            Some(&n) => {
                self.cur.push(n);
                self.started = true;
                self.token = true;
                self.plain_so_far = false;
                self.i += 2;
            }
            None => return Err("a trailing backslash"),
        }
        Ok(())
    }

    /// An unquoted `$NAME`: refused when its value would be split or
    /// globbed.
    fn unquoted_expansion(&mut self) -> Result<(), &'static str> {
        self.i += 1;
        self.token = true;
        match self.expand()? {
            Some(v) => {
                if v.chars().any(|c| " \t\n*?[".contains(c)) {
                    return Err("an unquoted variable whose value would be split or globbed");
                }
                if !v.is_empty() {
                    self.started = true;
                }
                self.cur.push_str(&v);
            }
            None => {
                self.cur.push('$');
                self.started = true;
            }
        }
        self.plain_so_far = false;
        Ok(())
    }

    /// Any other character: part of the word, and maybe its assignment `=`.
    fn plain(&mut self, c: char) {
        if c == '=' && self.eq.is_none() && self.plain_so_far && self.started {
            self.eq = Some(self.cur.len());
        } else if !is_name_char(c) || (!self.started && !is_name_start(c)) {
            self.plain_so_far = false;
        }
        self.cur.push(c);
        self.started = true;
        self.token = true;
        self.i += 1;
    }

    /// The value of the expansion just after a `$`: `None` for a literal
    /// `$`, an error for a form this splitter does not expand.
    fn expand(&mut self) -> Result<Option<String>, &'static str> {
        let chars = &self.chars;
        let name: String = match chars.get(self.i) {
            Some('{') => {
                let start = self.i + 1;
                let mut j = start;
                while j < chars.len() && is_name_char(chars[j]) {
                    j += 1;
                }
                if j == start || !is_name_start(chars[start]) || chars.get(j) != Some(&'}') {
                    return Err("a ${...} form other than ${NAME}");
                }
                self.i = j + 1;
                chars[start..j].iter().collect()
            }
            Some(&c) if is_name_start(c) => {
                let start = self.i;
                let mut j = start;
                while j < chars.len() && is_name_char(chars[j]) {
                    j += 1;
                }
                self.i = j;
                chars[start..j].iter().collect()
            }
            Some('(') => return Err("command substitution"),
            Some('\'' | '"') => return Err("$'...' or $\"...\" quoting"),
            Some(c) if c.is_ascii_digit() || "@*#?$!-".contains(*c) => {
                return Err("a special parameter ($1, $@, $$, ...)")
            }
            _ => return Ok(None), // a literal `$`
        };
        (self.env)(&name).map(Some).ok_or("an unset variable")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_every_variable_expanded() {
        assert_eq!(
            names("a $CPS ${PORT:-1} \"$X\" $1 $@ ${Y} $CPS"),
            ["CPS", "PORT", "X", "Y"]
        );
    }
}
