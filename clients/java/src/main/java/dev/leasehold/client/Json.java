package dev.leasehold.client;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small, strict JSON parser (RFC 8259) for what the proofs need: a JWS
 * header, its claims and a JWKS, with no dependency. Objects are
 * {@code Map<String, Object>} (in order; a name given twice is refused),
 * arrays {@code List<Object>}, strings {@code String}, numbers
 * {@code BigInteger} (no fraction, no exponent) or {@code BigDecimal},
 * {@code true}/{@code false} {@code Boolean}, and {@code null} null.
 */
final class Json {
  /** Nesting deeper than this is refused (nothing here nests past 3). */
  private static final int MAX_DEPTH = 64;

  private final String s;
  private int i;

  private Json(String s) {
    this.s = s;
  }

  /** Thrown for text that is not one JSON value. */
  static final class ParseException extends Exception {
    private static final long serialVersionUID = 1L;

    ParseException(String message) {
      super(message);
    }
  }

  /** The one JSON value of {@code text} (whitespace around it allowed). */
  static Object parse(String text) throws ParseException {
    Json p = new Json(text);
    p.ws();
    Object v = p.value(0);
    p.ws();
    if (p.i != text.length()) {
      throw p.error("text after the value");
    }
    return v;
  }

  private ParseException error(String what) {
    return new ParseException(what + " at offset " + i);
  }

  private void ws() {
    while (i < s.length()) {
      char c = s.charAt(i);
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
        return;
      }
      i++;
    }
  }

  private Object value(int depth) throws ParseException {
    if (depth > MAX_DEPTH) {
      throw error("nested too deep");
    }
    if (i >= s.length()) {
      throw error("a value expected");
    }
    char c = s.charAt(i);
    switch (c) {
      case '{':
        return object(depth);
      case '[':
        return array(depth);
      case '"':
        return string();
      case 't':
        return literal("true", Boolean.TRUE);
      case 'f':
        return literal("false", Boolean.FALSE);
      case 'n':
        return literal("null", null);
      default:
        if (c == '-' || (c >= '0' && c <= '9')) {
          return number();
        }
        throw error("unexpected '" + c + "'");
    }
  }

  private Object literal(String word, Object v) throws ParseException {
    if (!s.startsWith(word, i)) {
      throw error("unexpected text");
    }
    i += word.length();
    return v;
  }

  private Map<String, Object> object(int depth) throws ParseException {
    Map<String, Object> out = new LinkedHashMap<>();
    i++; // {
    ws();
    if (i < s.length() && s.charAt(i) == '}') {
      i++;
      return out;
    }
    while (true) {
      ws();
      if (i >= s.length() || s.charAt(i) != '"') {
        throw error("a member name expected");
      }
      String name = string();
      ws();
      if (i >= s.length() || s.charAt(i) != ':') {
        throw error("':' expected");
      }
      i++;
      ws();
      Object v = value(depth + 1);
      if (out.containsKey(name)) {
        throw error("member \"" + name + "\" given twice");
      }
      out.put(name, v);
      ws();
      if (i >= s.length()) {
        throw error("unterminated object");
      }
      char c = s.charAt(i++);
      if (c == '}') {
        return out;
      }
      if (c != ',') {
        throw error("',' or '}' expected");
      }
    }
  }

  private List<Object> array(int depth) throws ParseException {
    List<Object> out = new ArrayList<>();
    i++; // [
    ws();
    if (i < s.length() && s.charAt(i) == ']') {
      i++;
      return out;
    }
    while (true) {
      ws();
      out.add(value(depth + 1));
      ws();
      if (i >= s.length()) {
        throw error("unterminated array");
      }
      char c = s.charAt(i++);
      if (c == ']') {
        return out;
      }
      if (c != ',') {
        throw error("',' or ']' expected");
      }
    }
  }

  private String string() throws ParseException {
    i++; // "
    StringBuilder b = new StringBuilder();
    while (true) {
      if (i >= s.length()) {
        throw error("unterminated string");
      }
      char c = s.charAt(i++);
      if (c == '"') {
        return b.toString();
      }
      if (c < 0x20) {
        throw error("a control character in a string");
      }
      if (c != '\\') {
        b.append(c);
        continue;
      }
      if (i >= s.length()) {
        throw error("unterminated escape");
      }
      char e = s.charAt(i++);
      switch (e) {
        case '"' -> b.append('"');
        case '\\' -> b.append('\\');
        case '/' -> b.append('/');
        case 'b' -> b.append('\b');
        case 'f' -> b.append('\f');
        case 'n' -> b.append('\n');
        case 'r' -> b.append('\r');
        case 't' -> b.append('\t');
        case 'u' -> {
          if (i + 4 > s.length()) {
            throw error("a short \\u escape");
          }
          int cp = 0;
          for (int k = 0; k < 4; k++) {
            int d = Character.digit(s.charAt(i + k), 16);
            if (d < 0) {
              throw error("a bad \\u escape");
            }
            cp = cp * 16 + d;
          }
          i += 4;
          b.append((char) cp);
        }
        default -> throw error("a bad escape '\\" + e + "'");
      }
    }
  }

  private Object number() throws ParseException {
    int start = i;
    if (s.charAt(i) == '-') {
      i++;
    }
    if (i >= s.length()) {
      throw error("a digit expected");
    }
    if (s.charAt(i) == '0') {
      i++;
    } else if (s.charAt(i) >= '1' && s.charAt(i) <= '9') {
      digits();
    } else {
      throw error("a digit expected");
    }
    boolean integer = true;
    if (i < s.length() && s.charAt(i) == '.') {
      integer = false;
      i++;
      if (digits() == 0) {
        throw error("a digit expected");
      }
    }
    if (i < s.length() && (s.charAt(i) == 'e' || s.charAt(i) == 'E')) {
      integer = false;
      i++;
      if (i < s.length() && (s.charAt(i) == '+' || s.charAt(i) == '-')) {
        i++;
      }
      if (digits() == 0) {
        throw error("a digit expected");
      }
    }
    String text = s.substring(start, i);
    if (integer) {
      return new BigInteger(text);
    }
    try {
      return new BigDecimal(text);
    } catch (NumberFormatException | ArithmeticException e) {
      throw error("a number out of range");
    }
  }

  private int digits() {
    int n = 0;
    while (i < s.length() && s.charAt(i) >= '0' && s.charAt(i) <= '9') {
      i++;
      n++;
    }
    return n;
  }

  /** {@code s} as a JSON string literal (for messages and {@link KeySet#jwks()}). */
  static String quote(String s) {
    StringBuilder b = new StringBuilder(s.length() + 2).append('"');
    for (int k = 0; k < s.length(); k++) {
      char c = s.charAt(k);
      switch (c) {
        case '"' -> b.append("\\\"");
        case '\\' -> b.append("\\\\");
        case '\n' -> b.append("\\n");
        case '\r' -> b.append("\\r");
        case '\t' -> b.append("\\t");
        default -> {
          if (c < 0x20) {
            b.append(String.format("\\u%04x", (int) c));
          } else {
            b.append(c);
          }
        }
      }
    }
    return b.append('"').toString();
  }
}
