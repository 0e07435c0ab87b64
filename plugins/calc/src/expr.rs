//! A recursive-descent evaluator for arithmetic expressions. No code is executed: only
//! numbers, operators, a few constants and a fixed set of functions are understood.

struct Parser<'a> {
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
    text: &'a str,
    depth: usize,
}

const MAX_DEPTH: usize = 200;

pub fn evaluate(text: &str) -> Result<f64, String> {
    let mut parser = Parser { chars: text.char_indices().peekable(), text, depth: 0 };
    let value = parser.expression()?;
    parser.skip_space();
    if let Some(&(at, c)) = parser.chars.peek() {
        return Err(format!("unexpected {c:?} at position {at}"));
    }
    if !value.is_finite() {
        return Err(format!("the result is not a finite number ({value})"));
    }
    Ok(value)
}

impl Parser<'_> {
    fn skip_space(&mut self) {
        while self.chars.peek().is_some_and(|&(_, c)| c.is_whitespace()) {
            self.chars.next();
        }
    }

    fn eat(&mut self, expected: char) -> bool {
        self.skip_space();
        if self.chars.peek().is_some_and(|&(_, c)| c == expected) {
            self.chars.next();
            true
        } else {
            false
        }
    }

    fn expression(&mut self) -> Result<f64, String> {
        let mut value = self.term()?;
        loop {
            if self.eat('+') {
                value += self.term()?;
            } else if self.eat('-') {
                value -= self.term()?;
            } else {
                return Ok(value);
            }
        }
    }

    fn term(&mut self) -> Result<f64, String> {
        let mut value = self.power()?;
        loop {
            if self.eat('*') {
                value *= self.power()?;
            } else if self.eat('/') {
                let divisor = self.power()?;
                if divisor == 0.0 {
                    return Err("division by zero".into());
                }
                value /= divisor;
            } else if self.eat('%') {
                let divisor = self.power()?;
                if divisor == 0.0 {
                    return Err("remainder by zero".into());
                }
                value %= divisor;
            } else {
                return Ok(value);
            }
        }
    }

    fn power(&mut self) -> Result<f64, String> {
        let base = self.unary()?;
        if self.eat('^') {
            // Right-associative: 2^3^2 = 2^(3^2).
            let exponent = self.power()?;
            return Ok(base.powf(exponent));
        }
        Ok(base)
    }

    fn unary(&mut self) -> Result<f64, String> {
        if self.eat('-') {
            return Ok(-self.unary()?);
        }
        if self.eat('+') {
            return self.unary();
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<f64, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err("the expression is nested too deeply".into());
        }
        let value = self.atom_inner();
        self.depth -= 1;
        value
    }

    fn atom_inner(&mut self) -> Result<f64, String> {
        self.skip_space();
        let Some(&(start, c)) = self.chars.peek() else {
            return Err("the expression ends too early".into());
        };
        if self.eat('(') {
            let value = self.expression()?;
            return if self.eat(')') { Ok(value) } else { Err(format!("missing ')' for '(' at position {start}")) };
        }
        if c.is_ascii_digit() || c == '.' {
            let mut end = start;
            while let Some(&(i, c)) = self.chars.peek() {
                let exponent_sign = (c == '-' || c == '+') && self.text[..i].ends_with(['e', 'E']);
                if c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || exponent_sign {
                    end = i + c.len_utf8();
                    self.chars.next();
                } else {
                    break;
                }
            }
            let literal = &self.text[start..end];
            return literal.parse().map_err(|_| format!("{literal:?} is not a number"));
        }
        if c.is_ascii_alphabetic() {
            let mut end = start;
            while let Some(&(i, c)) = self.chars.peek() {
                if c.is_ascii_alphanumeric() || c == '_' {
                    end = i + 1;
                    self.chars.next();
                } else {
                    break;
                }
            }
            let name = &self.text[start..end];
            return self.named(name, start);
        }
        Err(format!("unexpected {c:?} at position {start}"))
    }

    fn named(&mut self, name: &str, at: usize) -> Result<f64, String> {
        match name {
            "pi" => return Ok(std::f64::consts::PI),
            "e" => return Ok(std::f64::consts::E),
            "tau" => return Ok(std::f64::consts::TAU),
            _ => {}
        }
        if !self.eat('(') {
            return Err(format!("unknown name {name:?} at position {at}"));
        }
        let mut args = vec![self.expression()?];
        while self.eat(',') {
            args.push(self.expression()?);
        }
        if !self.eat(')') {
            return Err(format!("missing ')' after the arguments of {name}"));
        }
        let one = |f: fn(f64) -> f64| match args.as_slice() {
            [x] => Ok(f(*x)),
            _ => Err(format!("{name} takes one argument")),
        };
        match name {
            "sqrt" => one(f64::sqrt),
            "abs" => one(f64::abs),
            "ln" => one(f64::ln),
            "log10" => one(f64::log10),
            "log2" => one(f64::log2),
            "exp" => one(f64::exp),
            "sin" => one(f64::sin),
            "cos" => one(f64::cos),
            "tan" => one(f64::tan),
            "asin" => one(f64::asin),
            "acos" => one(f64::acos),
            "atan" => one(f64::atan),
            "floor" => one(f64::floor),
            "ceil" => one(f64::ceil),
            "round" => one(f64::round),
            "min" | "max" if !args.is_empty() => {
                let pick = if name == "min" { f64::min } else { f64::max };
                Ok(args.iter().copied().fold(args[0], pick))
            }
            _ => Err(format!("unknown function {name:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::evaluate;

    #[test]
    fn precedence_and_functions() {
        assert_eq!(evaluate("2 + 3 * 4").unwrap(), 14.0);
        assert_eq!(evaluate("2 ^ 3 ^ 2").unwrap(), 512.0);
        assert_eq!(evaluate("-(1.5e1 - 5) % 4").unwrap(), -2.0);
        assert_eq!(evaluate("max(1, sqrt(16), 3)").unwrap(), 4.0);
        assert!(evaluate("1 / 0").is_err());
        assert!(evaluate("2 +").is_err());
        assert!(evaluate(&"(".repeat(10_000)).is_err());
    }
}
