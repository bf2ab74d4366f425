//! A small, safe arithmetic evaluator for the `calculator` tool: `+ - * / % ^`,
//! parentheses, unary minus and decimals. Recursive descent with a depth limit, so no input
//! can overflow the stack.

/// Why an expression could not be evaluated; the message is what the tool reports.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalcError {
    #[error("division by zero")]
    DivisionByZero,
    #[error("invalid expression: {0}")]
    Syntax(String),
    #[error("the result is not a finite number")]
    NotFinite,
}

const MAX_DEPTH: usize = 64;
const MAX_LEN: usize = 4096;

/// Evaluates an expression to a number.
pub fn evaluate(expression: &str) -> Result<f64, CalcError> {
    if expression.len() > MAX_LEN {
        return Err(CalcError::Syntax("the expression is too long".into()));
    }
    let mut parser = Parser {
        chars: expression.chars().filter(|c| !c.is_whitespace()).collect(),
        pos: 0,
        depth: 0,
    };
    if parser.chars.is_empty() {
        return Err(CalcError::Syntax("the expression is empty".into()));
    }
    let value = parser.sum()?;
    if let Some(c) = parser.peek() {
        return Err(CalcError::Syntax(format!("unexpected '{c}'")));
    }
    if !value.is_finite() {
        return Err(CalcError::NotFinite);
    }
    Ok(value)
}

/// Formats a result the way people write it: integers without `.0`.
pub fn format_number(value: f64) -> String {
    if value == value.trunc() && value.abs() < 1e15 {
        // Avoid "-0".
        let int = value as i64;
        format!("{int}")
    } else {
        let text = format!("{value}");
        text
    }
}

/// Evaluates and formats in one go (what the tool answers).
pub fn calculate(expression: &str) -> Result<String, CalcError> {
    evaluate(expression).map(format_number)
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn enter(&mut self) -> Result<(), CalcError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(CalcError::Syntax(
                "the expression is nested too deeply".into(),
            ));
        }
        Ok(())
    }

    // sum := product (('+' | '-') product)*
    fn sum(&mut self) -> Result<f64, CalcError> {
        let mut value = self.product()?;
        while let Some(op @ ('+' | '-')) = self.peek() {
            self.pos += 1;
            let rhs = self.product()?;
            value = if op == '+' { value + rhs } else { value - rhs };
        }
        Ok(value)
    }

    // product := unary (('*' | '/' | '%') unary)*
    fn product(&mut self) -> Result<f64, CalcError> {
        let mut value = self.unary()?;
        while let Some(op @ ('*' | '/' | '%')) = self.peek() {
            self.pos += 1;
            let rhs = self.unary()?;
            value = match op {
                '*' => value * rhs,
                _ if rhs == 0.0 => return Err(CalcError::DivisionByZero),
                '/' => value / rhs,
                _ => value % rhs,
            };
        }
        Ok(value)
    }

    // unary := '-' unary | '+' unary | power
    fn unary(&mut self) -> Result<f64, CalcError> {
        match self.peek() {
            Some('-') => {
                self.pos += 1;
                self.enter()?;
                let value = self.unary()?;
                self.depth -= 1;
                Ok(-value)
            }
            Some('+') => {
                self.pos += 1;
                self.enter()?;
                let value = self.unary()?;
                self.depth -= 1;
                Ok(value)
            }
            _ => self.power(),
        }
    }

    // power := atom ('^' unary)?   (right-associative, binds tighter than unary minus on its left)
    fn power(&mut self) -> Result<f64, CalcError> {
        let base = self.atom()?;
        if self.peek() == Some('^') {
            self.pos += 1;
            self.enter()?;
            let exponent = self.unary()?;
            self.depth -= 1;
            return Ok(base.powf(exponent));
        }
        Ok(base)
    }

    // atom := number | '(' sum ')'
    fn atom(&mut self) -> Result<f64, CalcError> {
        match self.peek() {
            Some('(') => {
                self.pos += 1;
                self.enter()?;
                let value = self.sum()?;
                self.depth -= 1;
                if self.peek() != Some(')') {
                    return Err(CalcError::Syntax("missing ')'".into()));
                }
                self.pos += 1;
                Ok(value)
            }
            Some(c) if c.is_ascii_digit() || c == '.' => {
                let start = self.pos;
                while matches!(self.peek(), Some(c) if c.is_ascii_digit() || c == '.') {
                    self.pos += 1;
                }
                let text: String = self.chars[start..self.pos].iter().collect();
                text.parse::<f64>()
                    .map_err(|_| CalcError::Syntax(format!("bad number '{text}'")))
            }
            Some(c) => Err(CalcError::Syntax(format!("unexpected '{c}'"))),
            None => Err(CalcError::Syntax("unexpected end of expression".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluates_with_precedence_and_formats_integers() {
        assert_eq!(calculate("2+3*4"), Ok("14".into()));
        assert_eq!(calculate("(2+3)*4"), Ok("20".into()));
        assert_eq!(calculate("2^3^2"), Ok("512".into()));
        assert_eq!(calculate("-2^2"), Ok("-4".into()));
        assert_eq!(calculate("10 % 4"), Ok("2".into()));
        assert_eq!(calculate("7/2"), Ok("3.5".into()));
        assert_eq!(calculate("1.5 + 1.5"), Ok("3".into()));
        assert_eq!(calculate("--3"), Ok("3".into()));
        assert_eq!(calculate("42"), Ok("42".into()));
    }

    #[test]
    fn bad_input_is_an_error_never_a_panic() {
        assert_eq!(calculate("1/0"), Err(CalcError::DivisionByZero));
        assert_eq!(calculate("5 % 0"), Err(CalcError::DivisionByZero));
        assert!(calculate("").is_err());
        assert!(calculate("2+").is_err());
        assert!(calculate("(1").is_err());
        assert!(calculate("1..2").is_err());
        assert!(calculate("abc").is_err());
        assert!(calculate(&"(".repeat(10_000)).is_err());
        assert!(calculate(&"-".repeat(3000)).is_err());
        assert!(calculate("10^1000").is_err());
    }
}
