//! GitHub Actions' expressions (`${{ … }}`), as far as the workflows the
//! fake runs use them: literals, context paths (`inputs.x`,
//! `steps.app-token.outputs.token`), `!`, `==`, `!=`, `&&`, `||`, brackets
//! and the status functions. Semantics follow GitHub's documentation:
//! `&&`/`||` yield an operand (not a boolean), strings compare without
//! regard to case, and a missing property is `null`.

/// A value of the expression language.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
}

impl Value {
    /// GitHub's truthiness: `false`, `0`, `''` and `null` are false.
    pub fn truthy(&self) -> bool {
        match self {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Num(n) => *n != 0.0,
            Value::Str(s) => !s.is_empty(),
        }
    }

    /// The value as `${{ }}` writes it into text.
    pub fn text(&self) -> String {
        match self {
            Value::Null => String::new(),
            Value::Bool(b) => b.to_string(),
            Value::Num(n) => n.to_string(),
            Value::Str(s) => s.clone(),
        }
    }

    fn number(&self) -> f64 {
        match self {
            Value::Null => 0.0,
            Value::Bool(b) => f64::from(u8::from(*b)),
            Value::Num(n) => *n,
            Value::Str(s) if s.trim().is_empty() => 0.0,
            Value::Str(s) => s.trim().parse().unwrap_or(f64::NAN),
        }
    }

    fn equals(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Str(a), Value::Str(b)) => a.eq_ignore_ascii_case(b),
            (Value::Null, Value::Null) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            _ => self.number() == other.number(),
        }
    }
}

/// Where an expression's names are looked up.
pub trait Context {
    /// A context path, e.g. `["steps", "claude", "outputs", "code"]`.
    fn lookup(&self, path: &[&str]) -> Value;
    /// `success()`, `failure()`, `cancelled()` or `always()`.
    fn status(&self, function: &str) -> Option<bool>;
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Path(String),
    Lit(Value),
    Not,
    Eq,
    Ne,
    And,
    Or,
    Open,
    Close,
}

fn tokens(src: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let two: String = chars[i..chars.len().min(i + 2)].iter().collect();
        match c {
            _ if c.is_whitespace() => i += 1,
            '(' => (out.push(Token::Open), i += 1).1,
            ')' => (out.push(Token::Close), i += 1).1,
            '\'' => {
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(format!("unclosed string in `{src}`")),
                        Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                            s.push('\'');
                            i += 2;
                        }
                        Some('\'') => break,
                        Some(&ch) => {
                            s.push(ch);
                            i += 1;
                        }
                    }
                }
                i += 1;
                out.push(Token::Lit(Value::Str(s)));
            }
            _ if two == "==" => (out.push(Token::Eq), i += 2).1,
            _ if two == "!=" => (out.push(Token::Ne), i += 2).1,
            _ if two == "&&" => (out.push(Token::And), i += 2).1,
            _ if two == "||" => (out.push(Token::Or), i += 2).1,
            '!' => (out.push(Token::Not), i += 1).1,
            _ if c.is_ascii_alphanumeric() || c == '_' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || matches!(chars[i], '_' | '-' | '.'))
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                out.push(match word.as_str() {
                    "true" => Token::Lit(Value::Bool(true)),
                    "false" => Token::Lit(Value::Bool(false)),
                    "null" => Token::Lit(Value::Null),
                    w if w.starts_with(|d: char| d.is_ascii_digit()) => Token::Lit(Value::Num(
                        w.parse()
                            .map_err(|_| format!("`{w}` is not a number in `{src}`"))?,
                    )),
                    _ => Token::Path(word),
                });
            }
            _ => return Err(format!("unexpected `{c}` in `{src}`")),
        }
    }
    Ok(out)
}

struct Parser<'a, C: Context> {
    tokens: Vec<Token>,
    at: usize,
    ctx: &'a C,
    src: &'a str,
}

impl<C: Context> Parser<'_, C> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn or(&mut self) -> Result<Value, String> {
        let mut left = self.and()?;
        while self.peek() == Some(&Token::Or) {
            self.at += 1;
            let right = self.and()?;
            if !left.truthy() {
                left = right;
            }
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Value, String> {
        let mut left = self.compare()?;
        while self.peek() == Some(&Token::And) {
            self.at += 1;
            let right = self.compare()?;
            if left.truthy() {
                left = right;
            }
        }
        Ok(left)
    }

    fn compare(&mut self) -> Result<Value, String> {
        let left = self.unary()?;
        match self.peek() {
            Some(Token::Eq) | Some(Token::Ne) => {
                let eq = self.peek() == Some(&Token::Eq);
                self.at += 1;
                let right = self.unary()?;
                Ok(Value::Bool(left.equals(&right) == eq))
            }
            _ => Ok(left),
        }
    }

    fn unary(&mut self) -> Result<Value, String> {
        if self.peek() == Some(&Token::Not) {
            self.at += 1;
            return Ok(Value::Bool(!self.unary()?.truthy()));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Value, String> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        match token {
            Some(Token::Lit(v)) => Ok(v),
            Some(Token::Open) => {
                let v = self.or()?;
                self.expect_close()?;
                Ok(v)
            }
            Some(Token::Path(p)) if self.peek() == Some(&Token::Open) => {
                self.at += 1;
                self.expect_close()?;
                self.ctx
                    .status(&p.to_ascii_lowercase())
                    .map(Value::Bool)
                    .ok_or_else(|| format!("no function `{p}()` in `{}`", self.src))
            }
            Some(Token::Path(p)) => {
                let parts: Vec<&str> = p.split('.').collect();
                Ok(self.ctx.lookup(&parts))
            }
            other => Err(format!("unexpected {other:?} in `{}`", self.src)),
        }
    }

    fn expect_close(&mut self) -> Result<(), String> {
        if self.peek() == Some(&Token::Close) {
            self.at += 1;
            Ok(())
        } else {
            Err(format!("`)` missing in `{}`", self.src))
        }
    }
}

/// Evaluates one expression (without its `${{ }}`).
pub fn eval(src: &str, ctx: &impl Context) -> Result<Value, String> {
    let mut p = Parser {
        tokens: tokens(src)?,
        at: 0,
        ctx,
        src,
    };
    let v = p.or()?;
    if p.at != p.tokens.len() {
        return Err(format!("`{src}` has more after its end"));
    }
    Ok(v)
}

/// A text with `${{ … }}` in it, each replaced by its value.
pub fn interpolate(text: &str, ctx: &impl Context) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 3..];
        let end = after
            .find("}}")
            .ok_or_else(|| format!("`${{{{` without `}}}}` in `{text}`"))?;
        out.push_str(&eval(&after[..end], ctx)?.text());
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// An `if:` condition: with or without its `${{ }}`, and combined with
/// `success()` when it calls no status function, as GitHub does.
pub fn condition(src: Option<&str>, ctx: &impl Context) -> Result<bool, String> {
    let Some(src) = src.map(str::trim) else {
        return Ok(ctx.status("success").unwrap_or(true));
    };
    let inner = src
        .strip_prefix("${{")
        .and_then(|s| s.strip_suffix("}}"))
        .unwrap_or(src);
    let calls_status = ["success(", "failure(", "cancelled(", "always("]
        .iter()
        .any(|f| inner.to_ascii_lowercase().replace(' ', "").contains(f));
    let value = eval(inner, ctx)?.truthy();
    Ok(if calls_status {
        value
    } else {
        value && ctx.status("success").unwrap_or(true)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Ctx {
        cancelled: bool,
    }

    impl Context for Ctx {
        fn lookup(&self, path: &[&str]) -> Value {
            match path {
                ["inputs", "sprint"] => Value::Str("final".into()),
                ["steps", "app-token", "outputs", "token"] => Value::Str("ghs_1".into()),
                ["secrets", "SUPERVISE_APP_ID"] => Value::Str(String::new()),
                ["needs", "verify", "result"] => Value::Str("success".into()),
                _ => Value::Null,
            }
        }
        fn status(&self, f: &str) -> Option<bool> {
            match f {
                "cancelled" => Some(self.cancelled),
                "success" => Some(!self.cancelled),
                "always" => Some(true),
                "failure" => Some(false),
                _ => None,
            }
        }
    }

    #[test]
    fn the_shipped_workflows_expressions_read_as_github_reads_them() {
        let c = Ctx { cancelled: false };
        let t = |s: &str| eval(s, &c).unwrap();
        assert_eq!(t("inputs.sprint != 'final'"), Value::Bool(false));
        assert_eq!(t("inputs.sprint == 'FINAL'"), Value::Bool(true));
        assert_eq!(t("steps.app-token.outputs.token || 'x'").text(), "ghs_1");
        assert_eq!(
            t("steps.nope.outputs.token || github.token || '1'").text(),
            "1"
        );
        assert_eq!(t("secrets.SUPERVISE_APP_ID != ''").text(), "false");
        assert_eq!(
            t("!cancelled() && needs.verify.result == 'success'"),
            Value::Bool(true)
        );
        assert_eq!(t("!(true && false)"), Value::Bool(true));
        assert_eq!(t("'it''s'").text(), "it's");
        assert_eq!(
            interpolate("supervise ${{ inputs.sprint }}!", &c).unwrap(),
            "supervise final!"
        );
        assert!(eval("inputs.sprint ==", &c).is_err());
        assert!(interpolate("${{ inputs.sprint", &c).is_err());
    }

    #[test]
    fn a_condition_without_a_status_function_also_needs_success() {
        let cancelled = Ctx { cancelled: true };
        assert!(!condition(Some("inputs.sprint == 'final'"), &cancelled).unwrap());
        assert!(condition(Some("${{ always() }}"), &cancelled).unwrap());
        assert!(!condition(Some("${{ !cancelled() }}"), &cancelled).unwrap());
        assert!(!condition(None, &cancelled).unwrap());
        let running = Ctx { cancelled: false };
        assert!(condition(Some("${{ !cancelled() }}"), &running).unwrap());
        assert!(condition(None, &running).unwrap());
    }
}
